"""The one form every protocol is converted into before the engine, and the output it gets back.

A `CanonicalRequest` is ordered messages + function tools + a tool choice + sampling: the
protocol adapters build it, the prompt builder templates it, and nothing past this point knows
which protocol a request came from. Output flows back as the dialect parser's stream events
(text, reasoning, tool-call start/args/end) followed by one `Finish`; the non-streaming
responses fold them with the dialect's `ParsedOutput`.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from zllm_core.conversation_clock import Held
from zllm_core.dialects.conversation import FunctionTool, Message, ToolCall
from zllm_core.dialects.events import (
    ParsedOutput,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from zllm_core.engine.sampling_params import SamplingParams

__all__ = [
    "CanonicalRequest", "Finish", "FunctionTool", "LogprobEntry", "Logprobs", "Message",
    "OutputEvent", "ParsedOutput",
    "ReasoningDelta", "RequestError", "ResponseFormat", "SamplingParams", "TextDelta", "ToolCall",
    "ToolCallArgsDelta", "ToolCallEnd", "ToolCallStart", "ToolChoice", "Usage",
    "named_tool_choice", "new_id", "sampling",
]

@dataclass(frozen=True)
class LogprobEntry:
    """One generated token: its bytes, its log-probability and the top alternatives'."""

    token: bytes
    logprob: float
    top: tuple[tuple[bytes, float], ...] = ()


@dataclass(frozen=True)
class Logprobs:
    """An output event: the entries of the tokens generated since the last one, in order. It
    comes before the text those tokens release (a parser may hold text back for a tag)."""

    entries: tuple[LogprobEntry, ...]


# The dialect parser's events and the logprobs; ParseError and Repair pass through unsent.
OutputEvent = Union[TextDelta, ReasoningDelta, ToolCallStart, ToolCallArgsDelta, ToolCallEnd, Logprobs]


def new_id(prefix: str) -> str:
    """A protocol object id (`chatcmpl-…`, `resp_…`, `msg_…`); random so ids never collide across restarts."""
    return f"{prefix}{secrets.token_hex(12)}"


class RequestError(Exception):
    """A request the protocol rejects; the server renders it in that protocol's error shape."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 code: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code
        self.retry_after = retry_after  # seconds, for a refusal the client should retry (429)


def sampling(aliases: dict[str, str] | None = None, **fields: Any) -> SamplingParams:
    """SamplingParams from request fields, where None (left out) takes SamplingParams' default
    and an explicit 0 stays 0. Its own validation failures become 400s naming the field, by the
    protocol's name for it where `aliases` gives one."""
    given = {k: v for k, v in fields.items() if v is not None}
    try:
        return SamplingParams(**given)
    except ValueError as exc:
        field = str(exc).split(" ", 1)[0]  # SamplingParams' messages start with the field's name
        param = (aliases or {}).get(field, field) if field in given else None
        raise RequestError(str(exc), param=param) from None


@dataclass(frozen=True)
class ToolChoice:
    """none: the model must not call; auto: it may; required: it must call one; named: it must call `name`."""

    mode: Literal["none", "auto", "required", "named"] = "auto"
    name: str | None = None
    parallel: bool = True


def named_tool_choice(name: str, tools: list[FunctionTool], parallel: bool,
                      param: str = "tool_choice") -> ToolChoice:
    """A choice that forces one tool: it must be one the request declares, in every protocol."""
    if name not in {t.name for t in tools}:
        raise RequestError(f"tool_choice names unknown function '{name}'", param=param)
    return ToolChoice("named", name, parallel)


@dataclass(frozen=True)
class ResponseFormat:
    """Structured output: `json_object` (any JSON object) or `json_schema` (a value under `schema`)."""

    kind: Literal["json_object", "json_schema"]
    schema: dict[str, Any] | None = None


@dataclass
class CanonicalRequest:
    messages: list[Message]
    tools: list[FunctionTool]
    sampling: SamplingParams
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    stream: bool = False
    # Lookup hint for the prefix cache (prompt_cache_key, previous response chain); never proof.
    cache_key: str | None = None
    # Whether the template should open a reasoning section (None: the template's default).
    thinking: bool | None = None
    max_tokens_requested: int | None = None
    response_format: ResponseFormat | None = None  # None: free text
    # State its conversion kept (the message memo's entries): the prompt builder files it with
    # the request's conversation once that is known (conversation_clock.py).
    held: tuple[Held, ...] = ()


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Finish:
    """The last event of every generation. reason: stop | length | tool_calls | abort."""

    reason: str
    usage: Usage
    stop_sequence: str | None = None  # the client's stop string that ended the output
