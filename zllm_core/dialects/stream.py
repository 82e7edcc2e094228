"""The incremental output parser every dialect builds on.

A parser is a state machine over text deltas. Each state is a method that consumes from the front
of the pending buffer and returns False when it needs more text. What reaches the caller is only
decided text: partial tags are held by the scanner, and whitespace the chat template would not
re-render (so would not belong to the parsed message) is held by the `Channel` until decided.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Sequence

from .conversation import FunctionTool
from .events import (Event, ParseError, ReasoningDelta, Repair, TextDelta, ToolCallArgsDelta,
                     ToolCallEnd, ToolCallStart)
from .json_args import escape_fragment, to_json
from .scanner import Markers, Match


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"  # the reasoning tags of every family here


def tool_call_id(scope: str, index: int, name: str) -> str:
    """Stable per request and call: the same function called twice, or in two requests, differs."""
    digest = hashlib.sha256(f"{scope}\x00{index}\x00{name}".encode()).hexdigest()
    return "call_" + digest[:24]


class Channel:
    """Visible text or reasoning, with the template's whitespace rules applied on the fly.

    `lead` characters are dropped at the start; a trailing run of `trail` characters is held, since
    whether it belongs to the message depends on what follows (another word, a tool call, the end).
    """

    def __init__(self, emit: Callable[[str], None], lead: Callable[[str], bool], trail: Callable[[str], bool]):
        self._emit, self._lead, self._trail = emit, lead, trail
        self.started = False
        self._held = ""

    def write(self, text: str) -> None:
        if not self.started:
            i = 0
            while i < len(text) and self._lead(text[i]):
                i += 1
            text = text[i:]
            if not text:
                return
            self.started = True
        cut = len(text)
        while cut > 0 and self._trail(text[cut - 1]):
            cut -= 1
        if cut:
            self._emit(self._held + text[:cut])
            self._held = ""
        self._held += text[cut:]

    def close(self, keep: Callable[[str], str]) -> None:
        """End the channel; `keep(held)` says how much of the held trailing run is message text."""
        kept = keep(self._held)
        if kept:
            self._emit(kept)
        self._held = ""


def never(_: str) -> bool:
    return False


def drop_all(_: str) -> str:
    return ""


def keep_all(held: str) -> str:
    return held


class ArgsWriter:
    """Streams `{"k": v, ...}` argument text for dialects that write one tag per parameter."""

    def __init__(self, emit: Callable[[str], None]):
        self._emit = emit
        self._count = 0

    def key(self, key: str) -> None:
        self._emit(("{" if self._count == 0 else ", ") + to_json(key) + ": ")
        self._count += 1

    def string_open(self) -> None:
        self._emit('"')

    def string_part(self, text: str) -> None:
        if text:
            self._emit(escape_fragment(text))

    def string_close(self) -> None:
        self._emit('"')

    def raw(self, json_text: str) -> None:
        self._emit(json_text)

    def close(self) -> None:
        self._emit("}" if self._count else "{}")


class StreamParser:
    """Shared machinery; subclasses provide the states (`_state` is the current one)."""

    def __init__(self, scope: str, tools: Sequence[FunctionTool] | None, in_reasoning: bool):
        self._scope = scope
        self._tools = {t.name: t for t in tools or ()}  # empty: any function name is accepted
        self._buf = ""
        self._out: list[Event] = []
        self._final = False
        self._next_index = 0
        self._call: int | None = None  # index of the call being streamed, if announced
        self._skipping = False         # inside a call we refused (unknown function)
        self._args = ArgsWriter(self._emit_args)
        self._thought = in_reasoning  # a reasoning block has been opened
        self.repairs: dict[str, int] = {}
        self._state: Callable[[], bool] = self._reasoning_state if in_reasoning else self._content_state
        self.reasoning = Channel(lambda s: self._out.append(ReasoningDelta(s)), *self._reasoning_ws())
        self.content = Channel(lambda s: self._out.append(TextDelta(s)), *self._content_ws())

    # -- public ----------------------------------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        self._buf += text
        self._run()
        return self._take()

    def finish(self) -> list[Event]:
        """End of generation: release held text, report a call left open."""
        self._final = True
        self._run()
        self._at_end()
        return self._take()

    # -- for subclasses --------------------------------------------------------------------------
    def _reasoning_ws(self) -> tuple[Callable[[str], bool], Callable[[str], bool]]:
        return never, never

    def _content_ws(self) -> tuple[Callable[[str], bool], Callable[[str], bool]]:
        return never, never

    reasoning_end: Markers  # what ends reasoning (a fence keeps reasoning text clear of it)

    def _content_state(self) -> bool:
        raise NotImplementedError

    def _reasoning_state(self) -> bool:
        text, tag = self._scan(self.reasoning_end)
        self.reasoning.write(text)
        if tag is None:
            return False
        self.reasoning.close(drop_all)
        self._end_reasoning(tag.tag)
        return True

    def _end_reasoning(self, tag: str) -> None:
        self._state = self._content_state

    def _go(self, state: Callable[[], bool]) -> Callable[[], None]:
        """An action that moves to `state`."""
        def go() -> None:
            self._state = state
        return go

    def _think_open(self) -> None:
        """An opening think tag starts reasoning only before anything else; later it is just words."""
        if self._thought or self.content.started:
            self.content.write(THINK_OPEN)
            return
        self._thought = True
        self._state = self._reasoning_state

    def _dispatch(self, markers: Markers, on_text: Callable[[str], None],
                  actions: dict[str, Callable[[], None]]) -> bool:
        """One step of a state: hand over the text before the next tag, then act on the tag.
        A tag with no action here closes nothing: it is dropped and counted."""
        text, tag = self._scan(markers)
        on_text(text)
        if tag is None:
            return False
        action = actions.get(tag.tag)
        if action is None:
            self._repair("stray_closing_tag", f"dropped {tag.tag!r}, which closes nothing here")
        else:
            action()
        return True

    def _text_after_calls(self, text: str) -> None:
        """After a call whitespace is layout; other text is kept but flagged."""
        if text.strip():
            self._repair("layout", "text after tool calls")
            self.content.write(text)

    def _layout_text(self, text: str) -> None:
        """Between a call's tags only whitespace belongs; anything else is dropped and flagged."""
        if text.strip():
            self._repair("layout", f"dropped text inside a tool call: {text[:40]!r}")

    def _at_end(self) -> None:
        """Called once after the final run; default closes the channels and reports open calls."""
        self.reasoning.close(keep_all)
        self.content.close(keep_all)
        if self._call is not None:
            self._error("unterminated_tool_call", "generation ended inside a tool call", self._call)
            self._call = None

    def _run(self) -> None:
        while self._state():
            pass

    def _take(self) -> list[Event]:
        out, self._out = self._out, []
        return out

    def _scan(self, markers: Markers) -> tuple[str, Match | None]:
        """Consume text up to the next tag (and the tag); returns (text before it, the tag)."""
        safe, match = markers.scan(self._buf, self._final)
        text = self._buf[:safe]
        if match is None:
            self._buf = self._buf[safe:]
            return text, None
        self._buf = self._buf[match.end:]
        if match.repair:
            self._repair(match.repair, f"accepted {match.tag!r} spelled differently")
        return text, match

    def _repair(self, kind: str, detail: str) -> None:
        self.repairs[kind] = self.repairs.get(kind, 0) + 1
        self._out.append(Repair(kind, detail))

    def _error(self, kind: str, detail: str, index: int | None = None) -> None:
        self._out.append(ParseError(kind, detail, index))

    def _emit_args(self, text: str) -> None:
        if self._call is not None and not self._skipping and text:
            self._out.append(ToolCallArgsDelta(self._call, text))

    def _start_call(self, name: str) -> bool:
        """Announce a call, or refuse it (unknown function) and skip its body. True if announced."""
        if self._tools and name not in self._tools:
            self._error("unknown_function", f"model called {name!r}, which is not among the tools")
            self._skipping = True
            return False
        index = self._next_index
        self._next_index += 1
        self._call, self._skipping = index, False
        self._args = ArgsWriter(self._emit_args)
        self._out.append(ToolCallStart(index, tool_call_id(self._scope, index, name), name))
        return True

    def _end_call(self, spoiled: str | None = None) -> None:
        """Close the current call; a spoiled call gets a ParseError instead of ToolCallEnd."""
        if self._call is not None and not self._skipping:
            if spoiled:
                self._error("invalid_arguments", spoiled, self._call)
            else:
                self._out.append(ToolCallEnd(self._call))
        self._call, self._skipping = None, False

    def _tool(self, name: str) -> FunctionTool | None:
        return self._tools.get(name)
