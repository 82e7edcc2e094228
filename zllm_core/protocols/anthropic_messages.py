"""Anthropic Messages: request model, conversion to the canonical form, and the event stream.

The system prompt is top level (a string or blocks); content is blocks. tool_use blocks become the
assistant's tool calls and tool_result blocks become tool messages, so a tool echo re-enters the
prompt exactly as the dialect renders history. The stream's order is part of the protocol:
message_start, per block content_block_start / deltas / content_block_stop, message_delta,
message_stop.
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Callable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from zllm_core.dialects import arguments_text

from zllm_core.protocols.canonical import (
    CanonicalRequest, Finish, FunctionTool, Message, OutputEvent, ParsedOutput, ReasoningDelta,
    RequestError, TextDelta, ToolCall, ToolCallArgsDelta, ToolCallEnd,
    ToolCallStart, ToolChoice, Usage, named_tool_choice, sampling,
)
from zllm_core.protocols.message_memo import MessageMemo, every_item
from zllm_core.protocols.tool_schema import function_tool

# Claude Code prepends this attribution block; its per-request cch= nonce would fork every prefix.
BILLING_HEADER = "x-anthropic-billing-header:"


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class TextBlock(_Tolerant):
    type: Literal["text"]
    text: str


class ThinkingBlock(_Tolerant):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Tolerant):
    type: Literal["redacted_thinking"]


class ToolUseBlock(_Tolerant):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Tolerant):
    type: Literal["tool_result"]
    tool_use_id: str
    content: Union[str, list[Union[TextBlock, "OtherBlock"]], None] = None
    is_error: bool | None = None


class OtherBlock(_Tolerant):
    """image, document, ...: accepted by the schema so the error can name the block."""

    type: Literal["image", "document", "search_result", "server_tool_use",
                  "web_search_tool_result", "container_upload"]


Block = Union[TextBlock, ThinkingBlock, RedactedThinkingBlock, ToolUseBlock, ToolResultBlock,
              OtherBlock]
ToolResultBlock.model_rebuild()


class AnthropicMessage(_Tolerant):
    role: Literal["user", "assistant", "system"]
    content: Union[str, list[Block]]


class Tool(_Tolerant):
    """A client tool; server tools (web_search_20250305, bash_20250124, ...) carry another type."""

    name: str = Field(min_length=1)
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoiceParam(_Tolerant):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingParam(_Tolerant):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None


class Metadata(_Tolerant):
    user_id: str | None = None


MESSAGES = MessageMemo()  # a resent history is validated and converted once (count_tokens too)


class CountTokensRequest(_Tolerant):
    model: str
    messages: Annotated[list[AnthropicMessage], MESSAGES.validator()] = Field(min_length=1)
    system: Union[str, list[TextBlock], None] = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None
    metadata: Metadata | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stream: bool | None = False
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)


def _system(system: Union[str, list[TextBlock], None]) -> list[Message]:
    if system is None:
        return []
    blocks = [TextBlock(type="text", text=system)] if isinstance(system, str) else list(system)
    if blocks and blocks[0].text.startswith(BILLING_HEADER):
        blocks = blocks[1:]
    text = "\n\n".join(b.text for b in blocks)
    return [Message(role="system", content=text)] if text else []


def _unsupported(block: OtherBlock, where: str) -> RequestError:
    return RequestError(f"{where}: content block type '{block.type}' is not supported by this "
                        "model (text only)", param=where)


def _result_text(block: ToolResultBlock, where: str) -> str:
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    for j, part in enumerate(block.content):
        if isinstance(part, OtherBlock):
            raise _unsupported(part, f"{where}.content[{j}]")
    return "\n".join(p.text for p in block.content)


# The argument text a call had when the server emitted it, by call id (None: not known).
Remembered = Callable[[str], Optional[str]]


def _turn(m: AnthropicMessage, i: int, remembered: Remembered) -> list[Message]:
    """One Anthropic message becomes tool messages (its tool_result blocks) and/or one message."""
    if isinstance(m.content, str):
        return [Message(role=m.role, content=m.content)]
    out: list[Message] = []
    text, reasoning, calls = [], [], []
    for j, block in enumerate(m.content):
        where = f"messages[{i}].content[{j}]"
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ThinkingBlock):
            reasoning.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            # tool_use carries an object: reuse the model's own text for it, so the echo
            # renders byte for byte and the prompt does not fork at the call.
            args = arguments_text(block.input, remembered(block.id))
            calls.append(ToolCall(id=block.id, name=block.name, arguments=args))
        elif isinstance(block, ToolResultBlock):
            out.append(Message(role="tool", content=_result_text(block, where),
                               tool_call_id=block.tool_use_id))
        elif isinstance(block, OtherBlock):
            raise _unsupported(block, where)
    if text or calls or reasoning or not out:
        out.append(Message(role=m.role, content="".join(text),
                           reasoning="".join(reasoning) or None, tool_calls=tuple(calls)))
    return out


def _tool_choice(req: CountTokensRequest, tools: list[FunctionTool]) -> ToolChoice:
    choice = req.tool_choice
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    parallel = not choice.disable_parallel_tool_use
    if choice.type == "tool":
        if not choice.name:
            raise RequestError("tool_choice.name is required when tool_choice.type is 'tool'",
                               param="tool_choice.name")
        return named_tool_choice(choice.name, tools, parallel, param="tool_choice.name")
    return ToolChoice({"any": "required"}.get(choice.type, choice.type), None, parallel)


def _thinking(t: ThinkingParam | None) -> bool | None:
    return None if t is None else t.type != "disabled"


def _forgotten(call_id: str) -> None:
    return None


def to_canonical(req: CountTokensRequest, remembered: Remembered = _forgotten) -> CanonicalRequest:
    # Conversions are remembered per tool-call memory (the server's one), as they read it.
    turns = MESSAGES.convert(req.messages, every_item(lambda m, i: _turn(m, i, remembered)),
                             context=getattr(remembered, "__self__", remembered))
    messages = _system(req.system) + turns
    tools = [function_tool(t.name, t.description, t.input_schema, f"tools[{i}].input_schema")
             for i, t in enumerate(req.tools or []) if t.type in (None, "custom")]
    params = sampling()
    if isinstance(req, MessagesRequest):
        params = sampling({"stop": "stop_sequences"}, temperature=req.temperature,
                          top_p=req.top_p, top_k=req.top_k, stop=req.stop_sequences)
    return CanonicalRequest(
        messages=messages, tools=tools, sampling=params, tool_choice=_tool_choice(req, tools),
        stream=bool(getattr(req, "stream", False)), thinking=_thinking(req.thinking),
        # Claude Code's user_id carries its session id: a stable hint for the prefix cache.
        cache_key=req.metadata.user_id if req.metadata else None,
        max_tokens_requested=getattr(req, "max_tokens", None), held=MESSAGES.held(req.messages))


STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "abort": "end_turn"}


def _usage(u: Usage) -> dict[str, Any]:
    # Anthropic counts cached prompt tokens apart from input_tokens.
    return {"input_tokens": u.prompt_tokens - u.cached_tokens,
            "output_tokens": u.completion_tokens,
            "cache_read_input_tokens": u.cached_tokens, "cache_creation_input_tokens": 0}


def _stop(finish: Finish) -> dict[str, Any]:
    if finish.stop_sequence is not None:
        return {"stop_reason": "stop_sequence", "stop_sequence": finish.stop_sequence}
    return {"stop_reason": STOP_REASONS[finish.reason], "stop_sequence": None}


def _message(id: str, model: str, content: list[dict[str, Any]], stop: dict[str, Any],
             usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
            **stop, "usage": usage}


def message(id: str, model: str, out: ParsedOutput, finish: Finish) -> dict[str, Any]:
    """The non-streaming message object."""
    content: list[dict[str, Any]] = []
    if out.reasoning:
        content.append({"type": "thinking", "thinking": out.reasoning, "signature": ""})
    if out.content:
        content.append({"type": "text", "text": out.content})
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
                for c in out.tool_calls]
    return _message(id, model, content, _stop(finish), _usage(finish.usage))


def _input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the object Anthropic clients expect ({} if the model's text is not one)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class MessagesStream:
    """Turns canonical output events into Anthropic stream events, opening and closing blocks."""

    def __init__(self, id: str, model: str, prompt_tokens: int):
        self.id, self.model, self.prompt_tokens = id, model, prompt_tokens
        self.index = -1
        self.open: str | None = None  # kind of the open block: text | thinking | tool_use

    def start(self) -> list[dict[str, Any]]:
        # Cached tokens are known only at the end; message_delta carries the final usage.
        msg = _message(self.id, self.model, [], {"stop_reason": None, "stop_sequence": None},
                       _usage(Usage(self.prompt_tokens, 0)))
        return [{"type": "message_start", "message": msg}, {"type": "ping"}]

    def _switch(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        self.index += 1
        self.open = kind
        events.append({"type": "content_block_start", "index": self.index, "content_block": block})
        return events

    def _close(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        events = []
        if self.open == "thinking":
            events.append(self._delta({"type": "signature_delta", "signature": ""}))
        self.open = None
        events.append({"type": "content_block_stop", "index": self.index})
        return events

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def event(self, ev: OutputEvent) -> list[dict[str, Any]]:
        if isinstance(ev, (TextDelta, ReasoningDelta)) and not ev.text:
            return []
        if isinstance(ev, TextDelta):
            events = [] if self.open == "text" else self._switch("text", {"type": "text", "text": ""})
            return events + [self._delta({"type": "text_delta", "text": ev.text})]
        if isinstance(ev, ReasoningDelta):
            events = [] if self.open == "thinking" else self._switch(
                "thinking", {"type": "thinking", "thinking": "", "signature": ""})
            return events + [self._delta({"type": "thinking_delta", "thinking": ev.text})]
        if isinstance(ev, ToolCallStart):
            return self._switch("tool_use", {"type": "tool_use", "id": ev.id, "name": ev.name,
                                             "input": {}})
        if isinstance(ev, ToolCallArgsDelta) and ev.delta:
            return [self._delta({"type": "input_json_delta", "partial_json": ev.delta})]
        if isinstance(ev, ToolCallEnd):
            return self._close()
        return []

    def finish(self, fin: Finish) -> list[dict[str, Any]]:
        delta = {"type": "message_delta",
                 "delta": _stop(fin),
                 "usage": _usage(fin.usage)}
        return self._close() + [delta, {"type": "message_stop"}]

    def error(self, exc: RequestError) -> dict[str, Any]:
        return {"type": "error", "error": {"type": "api_error", "message": exc.message}}
