"""OpenAI Responses output: the item event stream and the response object it builds.

Responses is an event protocol: text, reasoning and each function call are separate output items,
each with added / delta / done events, every event numbered by sequence_number, and the final
response carries the very same items (and ids) that were streamed.
"""
from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from zllm_core.protocols.canonical import (
    Finish, LogprobEntry, Logprobs, OutputEvent, ReasoningDelta, RequestError, SamplingParams,
    TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart, Usage, new_id,
)
from zllm_core.protocols.openai_logprobs import wire_logprobs
from zllm_core.protocols.openai_responses import ResponsesRequest, sealed_reasoning, split_name


def _usage(u: Usage) -> dict[str, Any]:
    return {"input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.total_tokens}


class ResponsesStream:
    """Turns canonical output events into Responses events and the final response object.

    The same item dicts are streamed and placed in `response.output`, so ids always agree.
    A token's logprob rides on the first text delta at or after it; the message's text part
    holds all of them (the tokens of tags and calls included, when the request asked).
    """

    def __init__(self, req: ResponsesRequest, id: str, model: str, params: SamplingParams):
        """`params` are the sampling values the request runs with, which the response echoes."""
        self.req, self.id, self.model, self.params = req, id, model, params
        self.created_at = int(time.time())
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.open: str | None = None  # kind of the open item: message | reasoning | function_call
        self.status, self.usage, self.incomplete = "in_progress", None, None
        self.pending: list[LogprobEntry] = []  # not yet sent with a delta
        self.logprobs: list[LogprobEntry] = []  # the open message's, for its text part

    def response(self) -> dict[str, Any]:
        r = self.req
        return {"id": self.id, "object": "response", "created_at": self.created_at,
                "status": self.status, "model": self.model,
                "output": [_public_item(i) for i in self.output],
                "error": None, "incomplete_details": self.incomplete,
                "instructions": r.instructions, "max_output_tokens": r.max_output_tokens,
                "previous_response_id": r.previous_response_id,
                "parallel_tool_calls": r.parallel_tool_calls is not False,
                "temperature": self.params.temperature, "top_p": self.params.top_p,
                "top_logprobs": r.top_logprobs,
                "tool_choice": "auto" if r.tool_choice is None else _dump(r.tool_choice),
                "tools": [_dump(t) for t in r.tools or []], "store": r.store is not False,
                "metadata": r.metadata or {}, "text": {"format": (r.text or {}).get("format") or {"type": "text"}},
                "reasoning": r.reasoning, "truncation": "disabled", "usage": self.usage}

    def _ev(self, type: str, **fields: Any) -> dict[str, Any]:
        ev = {"type": type, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return ev

    def start(self) -> list[dict[str, Any]]:
        return [self._ev("response.created", response=self.response()),
                self._ev("response.in_progress", response=self.response())]

    @property
    def _item(self) -> dict[str, Any]:
        return self.output[-1]

    def _where(self) -> dict[str, Any]:
        return {"item_id": self._item["id"], "output_index": len(self.output) - 1}

    def _add(self, kind: str, item: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        self.open = kind
        self.output.append(item)
        events.append(self._ev("response.output_item.added", output_index=len(self.output) - 1,
                               item=dict(item)))
        if kind in ("message", "reasoning"):
            part = _empty_part(kind)
            events.append(self._ev("response.content_part.added", **self._where(),
                                   content_index=0, part=part))
        return events

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        """`status` is the item's: `incomplete` when the output budget cut it off."""
        if self.open is None:
            return []
        item, where, events = self._item, self._where(), []
        if self.open == "message":
            self.logprobs += self.pending
            logprobs, self.logprobs, self.pending = wire_logprobs(self.logprobs), [], []
            part = {"type": "output_text", "text": item.pop("_text"), "annotations": [],
                    "logprobs": logprobs}
            item["content"] = [part]
            events += [self._ev("response.output_text.done", **where, content_index=0,
                                text=part["text"], logprobs=logprobs),
                       self._ev("response.content_part.done", **where, content_index=0, part=part)]
        elif self.open == "reasoning":
            part = {"type": "reasoning_text", "text": item.pop("_text")}
            item["content"] = [part]
            if "reasoning.encrypted_content" in (self.req.include or []):
                item["encrypted_content"] = sealed_reasoning(part["text"])
            events += [self._ev("response.reasoning_text.done", **where, content_index=0,
                                text=part["text"]),
                       self._ev("response.content_part.done", **where, content_index=0, part=part)]
        else:
            events.append(self._ev("response.function_call_arguments.done", **where,
                                   name=item["name"], arguments=item["arguments"]))
        item["status"] = status
        self.open = None
        events.append(self._ev("response.output_item.done", output_index=where["output_index"],
                               item=item))
        return events

    def event(self, ev: OutputEvent) -> list[dict[str, Any]]:
        if isinstance(ev, Logprobs):
            self.pending += ev.entries
            return []
        if isinstance(ev, (TextDelta, ReasoningDelta)) and not ev.text:
            return []
        if isinstance(ev, TextDelta):
            events = [] if self.open == "message" else self._add("message", {
                "id": new_id("msg_"), "type": "message", "role": "assistant",
                "status": "in_progress", "content": [], "_text": ""})
            self._item["_text"] += ev.text
            sent, self.pending = self.pending, []
            self.logprobs += sent
            return _public(events) + [self._ev("response.output_text.delta", **self._where(),
                                               content_index=0, delta=ev.text,
                                               logprobs=wire_logprobs(sent))]
        if isinstance(ev, ReasoningDelta):
            events = [] if self.open == "reasoning" else self._add("reasoning", {
                "id": new_id("rs_"), "type": "reasoning", "summary": [], "content": [],
                "_text": ""})
            self._item["_text"] += ev.text
            return _public(events) + [self._ev("response.reasoning_text.delta", **self._where(),
                                               content_index=0, delta=ev.text)]
        if isinstance(ev, ToolCallStart):
            namespace, name = split_name(ev.name, self.req)
            item = {"id": new_id("fc_"), "type": "function_call", "status": "in_progress",
                    "call_id": ev.id, "name": name, "arguments": ""}
            if namespace:
                item["namespace"] = namespace
            return _public(self._add("function_call", item))
        if isinstance(ev, ToolCallArgsDelta) and ev.delta:
            self._item["arguments"] += ev.delta
            return [self._ev("response.function_call_arguments.delta", **self._where(),
                             delta=ev.delta)]
        if isinstance(ev, ToolCallEnd):
            return self._close()
        return []

    def finish(self, fin: Finish) -> list[dict[str, Any]]:
        truncated = fin.reason == "length"
        events = self._close("incomplete" if truncated else "completed")
        self.usage = _usage(fin.usage)
        if truncated:
            self.status, self.incomplete = "incomplete", {"reason": "max_output_tokens"}
        else:
            self.status = "completed"
        kind = "response.completed" if self.status == "completed" else "response.incomplete"
        return events + [self._ev(kind, response=self.response())]

    def error(self, exc: RequestError) -> dict[str, Any]:
        return self._ev("error", code=exc.code, message=exc.message, param=exc.param)


def _empty_part(kind: str) -> dict[str, Any]:
    if kind == "message":
        return {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    return {"type": "reasoning_text", "text": ""}


def _public_item(item: dict[str, Any]) -> dict[str, Any]:
    """A snapshot of an item without the encoder's private text buffer."""
    return {k: v for k, v in item.items() if not k.startswith("_")}


def _public(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for ev in events:
        if "item" in ev:
            ev["item"] = _public_item(ev["item"])
    return events


def _dump(model: Any) -> Any:
    return model.model_dump(exclude_none=True) if isinstance(model, BaseModel) else model
