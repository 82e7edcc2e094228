"""ChatML/Hermes JSON tool calls (Qwen2.5, Qwen3): `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`.

Ground truth is Qwen3's chat template (zllm_core/dialects/templates/qwen3.jinja): arguments are
printed verbatim when given as text, reasoning as `<think>\\n{r}\\n</think>\\n\\n`, one newline before
the first call when there is text, and one between calls.
"""
from __future__ import annotations

import json
import re
from typing import Sequence

from .conversation import FunctionTool, Message, ToolCall
from .dialect import ToolDialect
from .json_args import split_members, to_json
from .json_depth import JsonDepth
from .scanner import Markers, escaped_spellings
from .stream import Channel, StreamParser, never

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

_TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
               '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
_ENVELOPE = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*(?=\S)')


def _markers(*tags: str) -> Markers:
    return Markers({t: escaped_spellings(t) for t in tags})


_CONTENT = _markers(THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE)
_REASONING = _markers(THINK_CLOSE)
_BETWEEN = _markers(CALL_OPEN, CALL_CLOSE, THINK_CLOSE)


def _newline(c: str) -> bool:
    return c == "\n"


class HermesParser(StreamParser):
    def __init__(self, scope: str, tools: Sequence[FunctionTool], in_reasoning: bool):
        super().__init__(scope, tools, in_reasoning)
        self._env = ""
        self._depth = JsonDepth()
        self._args_at: int | None = None  # where the arguments value starts in the envelope
        self._args_end: int | None = None
        self._args_depth = JsonDepth()
        self._sent = 0                    # envelope text already streamed as argument deltas

    def _reasoning_ws(self):
        return _newline, _newline

    def _content_ws(self):
        return never, _newline  # text is printed as is, except the newline that precedes a call

    _reasoning_markers = _REASONING

    def _end_reasoning(self, tag: str) -> None:
        # The template re-renders `</think>\n\n` + content.lstrip("\n"): leading newlines are layout.
        self.content = Channel(self.content._emit, _newline, _newline)
        self._state = self._content_state

    def _content_state(self) -> bool:
        text, tag = self._scan(_CONTENT)
        self.content.write(text)
        if tag is None:
            return False
        if tag.tag == THINK_OPEN:
            self._think_tag(tag.tag)
        elif tag.tag == CALL_OPEN:
            self.content.close(lambda held: held[:-1])  # one newline separates text from the call
            self._open_call()
        else:
            self._repair("stray_closing_tag", f"dropped {tag.tag!r} outside a tool call")
        return True

    def _open_call(self) -> None:
        self._env, self._depth, self._args_at, self._args_end, self._sent = "", JsonDepth(), None, None, 0
        self._state = self._envelope_start_state

    def _envelope_start_state(self) -> bool:
        stripped = self._buf.lstrip()
        if not stripped:
            self._buf = ""
            return False
        if stripped[0] != "{":
            self._error("malformed_tool_call", "tool call does not start with a JSON object")
            self._buf = stripped
            self._state = self._skip_state
            return True
        self._buf = stripped
        self._state = self._envelope_state
        return True

    def _envelope_state(self) -> bool:
        start = len(self._env)
        self._env += self._buf
        self._buf = ""
        end = None
        for index, _, depth in self._depth.advance(self._env):
            if depth == 0:
                end = index + 1
                break
        if end is not None:
            self._buf = self._env[end:]
            self._env = self._env[:end]
        elif start == len(self._env):
            return False
        if self._args_at is None and not self._skipping:
            self._try_announce()
        if self._args_at is not None and end is None:
            self._stream_args()
        if end is None:
            return False
        self._finish_envelope()
        self._state = self._close_state
        return True

    def _try_announce(self) -> None:
        m = _ENVELOPE.match(self._env)
        if m is None:
            return
        name = json.loads(f'"{m.group(1)}"')
        if m.group() != f'{{"name": "{name}", "arguments": ':
            self._repair("layout", "tool-call envelope spaced differently from the template")
        if self._start_call(name):
            self._args_at = self._sent = m.end()
            self._args_depth = JsonDepth(m.end())

    def _stream_args(self) -> None:
        """Stream the arguments object as it grows, never past its closing bracket."""
        if self._env[self._args_at] not in "{[":  # scalars wait for the end: their extent is unknown
            return
        if self._args_end is None:
            for index, _, depth in self._args_depth.advance(self._env):
                if depth == 0:
                    self._args_end = index + 1
                    break
        upto = len(self._env) if self._args_end is None else self._args_end
        self._emit_args(self._env[self._sent:upto])
        self._sent = upto

    def _finish_envelope(self) -> None:
        if self._skipping:
            self._skipping = False
            return
        members = dict(split_members(self._env) or [])
        if self._args_at is None:
            self._late_announce(members)
            return
        arguments = members.get("arguments")
        if arguments is None:
            self._end_call("tool-call arguments are not valid JSON")
            return
        self._args_end = self._args_at + len(arguments)
        self._emit_args(self._env[self._sent:self._args_end])
        if len(members) != 2 or not self._env.endswith(arguments + "}"):
            self._repair("layout", "tool-call envelope laid out differently from the template")
        self._end_call(None if arguments.lstrip().startswith("{") else "tool-call arguments are not an object")

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
        text, tag = self._scan(_BETWEEN)
        if text.strip():
            self._repair("layout", "text inside a tool call after its JSON")
        if tag is None:
            return False
        if tag.tag == CALL_OPEN:
            self._repair("missing_closer", f"{CALL_CLOSE!r} missing before the next call")
            self._open_call()
        elif tag.tag == CALL_CLOSE:
            self._state = self._between_state
        else:
            self._repair("stray_closing_tag", f"dropped {tag.tag!r} inside a tool call")
        return True

    def _between_state(self) -> bool:
        return self._after_calls(_BETWEEN, {CALL_OPEN: self._open_call})

    def _skip_state(self) -> bool:
        _, tag = self._scan(_BETWEEN)
        if tag is None:
            return False
        if tag.tag == CALL_OPEN:
            self._open_call()
        elif tag.tag == CALL_CLOSE:
            self._state = self._between_state
        return True

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
            text = f"{head}{reasoning}\n{THINK_CLOSE}\n\n{message.content.lstrip(chr(10))}"
        else:
            text = message.content
        if message.tool_calls:
            text += ("\n" if message.content else "") + self.render_tool_calls(message.tool_calls)
        return text

    def render_tool_results(self, results: Sequence[Message]) -> str:
        body = "".join(f"\n<tool_response>\n{r.content}\n</tool_response>" for r in results)
        return f"<|im_start|>user{body}<|im_end|>\n"
