"""ChatML/Hermes JSON tool calls (Qwen2.5, Qwen3): `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`.

Ground truth is Qwen3's chat template (zllm_core/dialects/templates/qwen3.jinja): arguments are
printed verbatim when given as text, reasoning as `<think>\\n{r}\\n</think>\\n\\n`, one newline before
the first call when there is text, and one between calls.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Sequence

from .conversation import FunctionTool, Message, ToolCall
from .dialect import ToolDialect
from .json_args import split_members, to_json
from .json_depth import JsonDepth
from .scanner import Markers
from .stream import THINK_CLOSE, THINK_OPEN, StreamParser

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

_TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
               '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
_HEAD_LIMIT = 4096  # longest envelope start searched for the name; later names are read at the end
_ENVELOPE = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*(?=\S)')


_CONTENT = Markers.of(THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE, escaped=False)
_REASONING = Markers.of(THINK_CLOSE, escaped=False)
_BETWEEN = Markers.of(CALL_OPEN, CALL_CLOSE, THINK_CLOSE)


def _newline(c: str) -> bool:
    return c == "\n"


class HermesParser(StreamParser):
    reasoning_end = _REASONING

    def __init__(self, scope: str, tools: Sequence[FunctionTool], in_reasoning: bool):
        super().__init__(scope, tools, in_reasoning)
        self._reset_call()
        self._content_actions = {THINK_OPEN: self._think_open, CALL_OPEN: self._call_after_text}
        self._close_actions = {CALL_OPEN: self._call_without_closer, CALL_CLOSE: self._go(self._between_state)}
        self._between_actions = {CALL_OPEN: self._next_call}

    def _reasoning_ws(self):
        return _newline, _newline

    def _content_ws(self):
        # The template re-renders `</think>\n\n` + content.lstrip("\n"): after reasoning, leading
        # newlines are layout; without it, text is printed as is. A trailing newline may be the one
        # that separates text from a call.
        return (lambda c: self._thought and c == "\n"), _newline

    def _content_state(self) -> bool:
        return self._dispatch(_CONTENT, self.content.write, self._content_actions)

    def _call_after_text(self) -> None:
        self.content.close(lambda held: held[:-1])  # one newline separates text from the call
        self._next_call()

    def _reset_call(self) -> None:
        self._envelope: list[str] = []   # the call's JSON, chunk by chunk
        self._depth = JsonDepth()
        self._head = ""                  # the envelope's start, until the name is known
        self._args_depth: JsonDepth | None = None  # set once arguments stream
        self._args_sent = 0
        self._args_closed = False

    def _envelope_start_state(self) -> bool:
        stripped = self._buf.lstrip()
        if not stripped:
            self._buf = ""
            return False
        self._buf = stripped
        if stripped[0] == "{":
            self._state = self._envelope_state
        else:
            self._error("malformed_tool_call", "tool call does not start with a JSON object")
            self._state = self._skip_state
        return True

    def _envelope_state(self) -> bool:
        chunk, self._buf = self._buf, ""
        if not chunk:
            return False
        end = next((i + 1 for i, _, depth in self._depth.advance(chunk) if depth == 0), None)
        if end is not None:
            chunk, self._buf = chunk[:end], chunk[end:]
        self._envelope.append(chunk)
        if self._args_depth is not None:
            self._stream_args(chunk)
        elif not self._skipping and len(self._head) < _HEAD_LIMIT:
            self._head += chunk
            self._try_announce()
        if end is None:
            return False
        self._finish_envelope()
        self._state = self._close_state
        return True

    def _try_announce(self) -> None:
        m = _ENVELOPE.match(self._head)
        if m is None:
            return
        name = json.loads(f'"{m.group(1)}"')
        if m.group() != f'{{"name": "{name}", "arguments": ':
            self._repair("layout", "tool-call envelope spaced differently from the template")
        if self._start_call(name):
            self._args_depth = JsonDepth()
            self._stream_args(self._head[m.end():])

    def _stream_args(self, chunk: str) -> None:
        """Stream an arguments object as it grows, never past its closing bracket."""
        if self._args_closed or self._skipping or (self._args_sent == 0 and chunk[:1] not in ("{", "[", "")):
            return  # a scalar's extent is unknown until the envelope ends
        end = next((i + 1 for i, _, depth in self._args_depth.advance(chunk) if depth == 0), None)
        if end is not None:
            chunk, self._args_closed = chunk[:end], True
        self._emit_args(chunk)
        self._args_sent += len(chunk)

    def _finish_envelope(self) -> None:
        if self._skipping:
            self._skipping = False
            return
        envelope = "".join(self._envelope)
        members = dict(split_members(envelope) or [])
        if self._args_depth is None:
            self._late_announce(members)
            return
        arguments = members.get("arguments")
        if arguments is None:
            self._end_call("tool-call arguments are not valid JSON")
            return
        self._emit_args(arguments[self._args_sent:])
        if len(members) != 2 or not envelope.endswith(arguments + "}"):
            self._repair("layout", "tool-call envelope laid out differently from the template")
        self._end_call(None if arguments.startswith("{") else "tool-call arguments are not an object")

    def _late_announce(self, members: dict[str, str]) -> None:
        """An envelope whose name did not come first: announce it whole once complete."""
        name, arguments = members.get("name"), members.get("arguments")
        if name is None or arguments is None or not name.startswith('"'):
            self._error("malformed_tool_call", "tool call lacks a string name or arguments")
            return
        self._repair("layout", "tool-call envelope laid out differently from the template")
        if self._start_call(json.loads(name)):
            self._emit_args(arguments)
            self._end_call(None if arguments.startswith("{") else "tool-call arguments are not an object")
        else:
            self._skipping = False

    def _close_state(self) -> bool:
        return self._dispatch(_BETWEEN, self._layout_text, self._close_actions)

    def _call_without_closer(self) -> None:
        self._repair("missing_closer", f"{CALL_CLOSE!r} missing before the next call")
        self._next_call()

    def _between_state(self) -> bool:
        return self._dispatch(_BETWEEN, self._text_after_calls, self._between_actions)

    def _next_call(self) -> None:
        self._reset_call()
        self._state = self._envelope_start_state

    def _skip_state(self) -> bool:
        return self._dispatch(_BETWEEN, lambda _: None, self._close_actions)

    def _at_end(self) -> None:
        if self._state in (self._envelope_state, self._envelope_start_state) and self._call is None \
                and not self._skipping:
            self._error("unterminated_tool_call", "generation ended inside a tool call")
        elif self._state == self._close_state:
            self._repair("missing_closer", f"generation ended before {CALL_CLOSE!r}")
        super()._at_end()


class HermesDialect(ToolDialect):
    name = "hermes"
    reasoning_prompt_suffix = "<think>\n"
    text_stops = Markers.of(CALL_OPEN, escaped=False)
    parser_class = HermesParser

    def render_tools(self, tools: Sequence[FunctionTool]) -> str:
        return _TOOLS_HEAD + "".join("\n" + to_json(t.openai_dict()) for t in tools) + _TOOLS_TAIL

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        return "\n".join(f'{CALL_OPEN}\n{{"name": "{c.name}", "arguments": {c.arguments}}}\n{CALL_CLOSE}'
                         for c in calls)

    def render_output(self, message: Message, in_reasoning: bool = False) -> str:
        reasoning = (message.reasoning or "").strip("\n")
        if in_reasoning or reasoning:
            head = "" if in_reasoning else THINK_OPEN + "\n"
            text = head + reasoning + "\n" + THINK_CLOSE + "\n\n" + message.content.lstrip("\n")
        else:
            text = message.content
        if message.tool_calls:
            text += ("\n" if message.content else "") + self.render_tool_calls(message.tool_calls)
        return text

    def render_tool_results(self, results: Sequence[Message]) -> str:
        return f"<|im_start|>user\n{_tool_responses(results)}<|im_end|>\n"

    def inline_tools(self, messages: Sequence[Message], tools: Sequence[FunctionTool]) -> list[Message]:
        """The conversation for a ChatML template that renders no tools (SmolLM2's): the tool
        instructions end the system turn, calls are assistant text and each run of results is
        one user turn, so the prompt is byte for byte what Qwen2.5's template would print."""
        out: list[Message] = []
        if tools:
            if messages and messages[0].role == "system":
                out.append(replace(messages[0], content=messages[0].content + "\n\n" + self.render_tools(tools)))
                messages = messages[1:]
            else:
                out.append(Message("system", self.render_tools(tools)))
        results: list[Message] = []
        for m in messages:
            if m.role == "tool":
                results.append(m)
                continue
            if results:
                out.append(Message("user", _tool_responses(results)))
                results = []
            # The template prints no reasoning for any turn; a call turn drops it the same way.
            out.append(replace(m, content=self.render_output(replace(m, reasoning=None)), reasoning=None,
                               tool_calls=()) if m.tool_calls else m)
        if results:
            out.append(Message("user", _tool_responses(results)))
        return out


def _tool_responses(results: Sequence[Message]) -> str:
    return "\n".join(f"<tool_response>\n{r.content}\n</tool_response>" for r in results)
