"""OpenAI Chat Completions: request model, conversion to the canonical form, and the chunk stream.

Chat is the closest protocol to the canonical form: messages map one to one. The stream keeps each
tool call's index stable, sends its id and name once on the first chunk and only argument deltas
after, and (with stream_options.include_usage) ends with a chunk whose choices are empty.
"""
from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from zllm_core.engine.sampling_params import MAX_LOGPROBS
from zllm_core.protocols.canonical import (
    CanonicalRequest, Finish, FunctionTool, Message, OutputEvent, ParsedOutput, ReasoningDelta,
    RequestError, TextDelta, ToolCall, ToolCallArgsDelta, ToolCallStart,
    Logprobs, LogprobEntry, ToolChoice, Usage, named_tool_choice, sampling,
)
from zllm_core.protocols.message_memo import MessageMemo, every_item
from zllm_core.protocols.openai_logprobs import wire_logprobs
from zllm_core.protocols.tool_schema import function_tool, response_format


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class TextPart(_Tolerant):
    type: Literal["text"]
    text: str


class OtherPart(_Tolerant):
    """image_url, input_audio, file: accepted by the schema so the error can name the part."""

    type: Literal["image_url", "input_audio", "file", "refusal"]


ContentPart = Union[TextPart, OtherPart]


class FunctionCall(_Tolerant):
    name: str
    arguments: str


class ChatToolCall(_Tolerant):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Tolerant):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[ContentPart], None] = None
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDef(_Tolerant):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ChatTool(_Tolerant):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(_Tolerant):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Tolerant):
    include_usage: bool = False


MESSAGES = MessageMemo()  # a resent history is validated and converted once


class ChatRequest(_Tolerant):
    model: str
    messages: Annotated[list[ChatMessage], MESSAGES.validator()] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: Union[str, list[str], None] = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    n: int | None = Field(default=None, ge=1, le=1)
    response_format: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    reasoning_effort: str | None = None
    prompt_cache_key: str | None = None


def _text(content: Union[str, list[ContentPart], None], where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    for j, part in enumerate(content):
        if not isinstance(part, TextPart):
            raise RequestError(f"{where}.content[{j}]: content type '{part.type}' is not supported "
                               "by this model (text only)", param=f"{where}.content[{j}]")
    return "".join(p.text for p in content)


def _message(m: ChatMessage, i: int) -> Message:
    where = f"messages[{i}]"
    role = "system" if m.role == "developer" else m.role
    if role == "tool" and not m.tool_call_id:
        raise RequestError(f"{where}.tool_call_id is required for role 'tool'",
                           param=f"{where}.tool_call_id")
    calls = tuple(ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
                  for c in m.tool_calls or [])
    return Message(role=role, content=_text(m.content, where), reasoning=m.reasoning_content,
                   tool_calls=calls, tool_call_id=m.tool_call_id, name=m.name)


def _tool_choice(req: ChatRequest, tools: list[FunctionTool]) -> ToolChoice:
    parallel = req.parallel_tool_calls is not False
    choice = req.tool_choice
    if isinstance(choice, NamedToolChoice):
        return named_tool_choice(choice.function.name, tools, parallel)
    return ToolChoice(choice or ("auto" if tools else "none"), None, parallel)


def _logprobs(req: ChatRequest) -> int | None:
    if req.top_logprobs is not None and not req.logprobs:
        raise RequestError("top_logprobs requires logprobs to be true", param="top_logprobs")
    return (req.top_logprobs or 0) if req.logprobs else None


def to_canonical(req: ChatRequest) -> CanonicalRequest:
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    params = sampling(temperature=req.temperature, top_p=req.top_p, seed=req.seed, stop=stop,
                      logprobs=_logprobs(req))
    tools = [function_tool(t.function.name, t.function.description, t.function.parameters,
                           f"tools[{i}].function.parameters") for i, t in enumerate(req.tools or [])]
    return CanonicalRequest(
        messages=MESSAGES.convert(req.messages, every_item(lambda m, i: [_message(m, i)])), tools=tools,
        sampling=params, tool_choice=_tool_choice(req, tools), stream=bool(req.stream),
        cache_key=req.prompt_cache_key,
        thinking=None if req.reasoning_effort is None else req.reasoning_effort != "none",
        max_tokens_requested=req.max_completion_tokens or req.max_tokens,
        response_format=response_format(req.response_format, "response_format", "json_schema.schema"),
        held=MESSAGES.held(req.messages))


def _usage(u: Usage) -> dict[str, Any]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": 0}}


def _wire_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls]


def _logprobs_field(entries: list[LogprobEntry] | None) -> dict[str, Any] | None:
    return None if entries is None else {"content": wire_logprobs(entries), "refusal": None}


def completion(id: str, model: str, out: ParsedOutput, finish: Finish,
               logprobs: list[LogprobEntry] | None = None) -> dict[str, Any]:
    """The non-streaming chat.completion object; `logprobs` is None when the request did not ask."""
    message: dict[str, Any] = {"role": "assistant", "content": out.content or None}
    if out.reasoning:
        message["reasoning_content"] = out.reasoning
    if out.tool_calls:
        message["tool_calls"] = _wire_calls(out.tool_calls)
    return {"id": id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": _logprobs_field(logprobs),
                         "finish_reason": finish.reason}],
            "usage": _usage(finish.usage)}


class ChatStream:
    """Turns canonical output events into chat.completion.chunk objects.

    A token's logprob rides on the first chunk at or after it (the content chunk its text
    releases, else the finish chunk), so every token is reported once and in order.
    """

    def __init__(self, id: str, model: str, include_usage: bool):
        self.id, self.model, self.include_usage = id, model, include_usage
        self.created = int(time.time())
        self.pending: list[LogprobEntry] = []

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        logprobs, self.pending = self.pending or None, []
        chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                 "model": self.model, "system_fingerprint": None,
                 "choices": [{"index": 0, "delta": delta, "logprobs": _logprobs_field(logprobs),
                              "finish_reason": finish_reason}]}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def start(self) -> list[dict[str, Any]]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def event(self, ev: OutputEvent) -> list[dict[str, Any]]:
        if isinstance(ev, Logprobs):
            self.pending += ev.entries
            return []
        if isinstance(ev, TextDelta):
            return [self._chunk({"content": ev.text})] if ev.text else []
        if isinstance(ev, ReasoningDelta):
            return [self._chunk({"reasoning_content": ev.text})] if ev.text else []
        if isinstance(ev, ToolCallStart):
            call = {"index": ev.index, "id": ev.id, "type": "function",
                    "function": {"name": ev.name, "arguments": ""}}
            return [self._chunk({"tool_calls": [call]})]
        if isinstance(ev, ToolCallArgsDelta) and ev.delta:
            call = {"index": ev.index, "function": {"arguments": ev.delta}}
            return [self._chunk({"tool_calls": [call]})]
        return []

    def finish(self, fin: Finish) -> list[dict[str, Any]]:
        chunks = [self._chunk({}, fin.reason)]
        if self.include_usage:
            chunks.append({"id": self.id, "object": "chat.completion.chunk",
                           "created": self.created, "model": self.model,
                           "system_fingerprint": None, "choices": [],
                           "usage": _usage(fin.usage)})
        return chunks

    def error(self, exc: RequestError) -> dict[str, Any]:
        return {"error": {"message": exc.message, "type": "server_error", "param": exc.param,
                          "code": exc.code}}
