"""Stream events an output parser emits, and the message they fold into."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Union

from .conversation import Message, ToolCall


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArgsDelta:
    """A fragment of the call's JSON argument text; the fragments of one call concatenate to it."""
    index: int
    delta: str


@dataclass(frozen=True)
class ToolCallEnd:
    index: int


@dataclass(frozen=True)
class ParseError:
    """Output the dialect could not turn into a call. `index` names the call it spoiled, if one was
    already announced (an unterminated call gets no ToolCallEnd)."""
    kind: str  # unterminated_tool_call | invalid_arguments | unknown_function | malformed_tool_call
    detail: str
    index: int | None = None


@dataclass(frozen=True)
class Repair:
    """Non-canonical output accepted anyway; counted so fences and dashboards can see it."""
    kind: str  # case | escaped_tag | stray_closing_tag | missing_opener | layout
    detail: str


Event = Union[TextDelta, ReasoningDelta, ToolCallStart, ToolCallArgsDelta, ToolCallEnd, ParseError, Repair]


@dataclass
class ParsedOutput:
    """All events of one generation folded together (the non-streaming view)."""
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)
    repairs: list[Repair] = field(default_factory=list)

    @classmethod
    def fold(cls, events: Iterable[Event]) -> "ParsedOutput":
        out = cls()
        text: list[str] = []
        thought: list[str] = []
        calls: dict[int, tuple[str, str, list[str]]] = {}
        ended: list[int] = []
        for ev in events:
            if isinstance(ev, TextDelta):
                text.append(ev.text)
            elif isinstance(ev, ReasoningDelta):
                thought.append(ev.text)
            elif isinstance(ev, ToolCallStart):
                calls[ev.index] = (ev.id, ev.name, [])
            elif isinstance(ev, ToolCallArgsDelta):
                calls[ev.index][2].append(ev.delta)
            elif isinstance(ev, ToolCallEnd):
                ended.append(ev.index)
            elif isinstance(ev, ParseError):
                out.errors.append(ev)
            elif isinstance(ev, Repair):
                out.repairs.append(ev)
        out.content, out.reasoning = "".join(text), "".join(thought)
        out.tool_calls = [ToolCall(calls[i][0], calls[i][1], "".join(calls[i][2])) for i in ended]
        return out

    def message(self) -> Message:
        return Message("assistant", self.content, self.reasoning or None, tuple(self.tool_calls))
