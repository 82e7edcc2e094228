"""GLM XML tool calls: `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`.

Two layouts share one parser: GLM-4.5/4.6 put a newline after the name and after each tag pair
(templates/glm46.jinja in the tests), GLM-4.7 writes them back to back and opens reasoning in the
generation prompt. String values are raw, other values JSON; which is which comes from the schema.
"""
from __future__ import annotations

import json
from typing import Sequence

from .conversation import FunctionTool, Message, ToolCall
from .dialect import ToolDialect
from .json_args import split_members, to_json
from .param_values import ParamParser, StringSafety
from .scanner import Markers
from .stream import THINK_CLOSE, THINK_OPEN, drop_all

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"

_TOOLS_HEAD = ("<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n")
_TOOLS_TAIL = ("</tools>\n\nFor each function call, output the function name and arguments within the "
               "following XML format:\n")
_FORMAT_HINT = ("<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
                "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>")


_CONTENT = Markers.of(THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE, escaped=False)
_REASONING = Markers.of(THINK_CLOSE, escaped=False)
_NAME = Markers.of(KEY_OPEN, CALL_CLOSE, CALL_OPEN)
_KEY = Markers.of(KEY_CLOSE)
_BEFORE_VALUE = Markers.of(VALUE_OPEN)
_VALUE = Markers.of(VALUE_CLOSE)
_BETWEEN = Markers.of(CALL_OPEN, CALL_CLOSE, THINK_CLOSE, KEY_CLOSE, VALUE_CLOSE)
_SAFETY = StringSafety(_VALUE)


class GlmParser(ParamParser):
    reasoning_end = _REASONING
    value_end = _VALUE
    _safety = _SAFETY

    def __init__(self, scope: str, tools: Sequence[FunctionTool], in_reasoning: bool):
        super().__init__(scope, tools, in_reasoning)
        self._name = ""
        self._key = ""
        self._content_actions = {THINK_OPEN: self._think_open, THINK_CLOSE: self._bare_think_close,
                                 CALL_OPEN: self._open_call}
        self._between_actions = {CALL_OPEN: self._open_call}

    def _reasoning_ws(self):
        return str.isspace, str.isspace

    def _content_ws(self):
        return str.isspace, str.isspace

    def _content_state(self) -> bool:
        return self._dispatch(_CONTENT, self.content.write, self._content_actions)

    def _bare_think_close(self) -> None:
        if self._thought or self.content.started:
            self._repair("stray_closing_tag", f"dropped {THINK_CLOSE!r} after the reasoning")
        self._thought = True  # GLM-4.7 renders a turn without reasoning as a bare `</think>`

    def _open_call(self) -> None:
        self.content.close(drop_all)
        self._name = ""
        self._state = self._name_state

    def _name_state(self) -> bool:
        text, tag = self._scan(_NAME)
        self._name += text
        if tag is None:
            return False
        self._start_call(self._name.strip())
        self._next_param(tag.tag)
        return True

    def _next_param(self, tag: str) -> None:
        """After the name or a value: another key, or the end of the call."""
        if tag == KEY_OPEN:
            self._key = ""
            self._state = self._key_state
            return
        self._finish_call()
        self._state = self._between_state
        if tag == CALL_OPEN:
            self._repair("missing_closer", f"{CALL_CLOSE!r} missing before the next call")
            self._open_call()

    def _key_state(self) -> bool:
        text, tag = self._scan(_KEY)
        self._key += text
        if tag is None:
            return False
        self._state = self._before_value_state
        return True

    def _before_value_state(self) -> bool:
        text, tag = self._scan(_BEFORE_VALUE)
        self._layout_text(text)
        if tag is None:
            return False
        self._begin_value(self._key, self._kind(self._key))
        return True

    def _kind(self, key: str) -> str:
        tool = self._tool(self._name.strip())
        kind = tool.parameter_type(key) if tool else None
        return "auto" if kind is None else "string" if kind == "string" else "json"

    def _after_value_state(self) -> bool:
        text, tag = self._scan(_NAME)
        self._layout_text(text)
        if tag is None:
            return False
        self._next_param(tag.tag)
        return True

    def _between_state(self) -> bool:
        return self._dispatch(_BETWEEN, self._text_after_calls, self._between_actions)

    def _at_end(self) -> None:
        self.reasoning.close(drop_all)
        self.content.close(drop_all)
        if self._state in (self._name_state, self._key_state) and self._call is None and not self._skipping:
            self._error("unterminated_tool_call", "generation ended inside a tool call")
        super()._at_end()


class GlmDialect(ToolDialect):
    parser_class = GlmParser
    text_stops = Markers.of(CALL_OPEN, escaped=False)

    def __init__(self, newlines: bool):
        self._nl = "\n" if newlines else ""
        self.name = "glm45" if newlines else "glm47"
        self.reasoning_prompt_suffix = "" if newlines else THINK_OPEN

    @property
    def newline(self) -> str:
        """What follows the name and each tag pair: a newline (4.5/4.6) or nothing (4.7)."""
        return self._nl

    def render_tools(self, tools: Sequence[FunctionTool]) -> str:
        schemas = "".join(to_json(t.openai_dict()) + "\n" for t in tools)
        hint = _FORMAT_HINT if self._nl else _FORMAT_HINT.replace("\n", "")
        return _TOOLS_HEAD + schemas + _TOOLS_TAIL + hint

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        return "".join(self._render_call(c) for c in calls)

    def _render_call(self, call: ToolCall) -> str:
        members = split_members(call.arguments)
        if members is None:
            raise ValueError(f"tool call {call.name!r}: arguments are not a JSON object")
        nl = self._nl
        pairs = "".join(f"{KEY_OPEN}{k}{KEY_CLOSE}{nl}{VALUE_OPEN}{self._value(raw)}{VALUE_CLOSE}{nl}"
                        for k, raw in members)
        return f"{nl}{CALL_OPEN}{call.name}{nl}{pairs}{CALL_CLOSE}"

    def _value(self, raw: str) -> str:
        if not raw.startswith('"'):
            return self.json_value(raw)
        value = json.loads(raw)
        return self.json_string(value) or value

    def json_string(self, value: str) -> str | None:
        return _SAFETY.json_string(value)

    def json_value(self, raw: str) -> str:
        return _SAFETY.json_value(raw)

    def render_output(self, message: Message, in_reasoning: bool = False) -> str:
        nl = self._nl
        reasoning = (message.reasoning or "").strip()
        if in_reasoning:
            text = f"{reasoning}{THINK_CLOSE}"
        elif reasoning or nl:
            text = f"{nl}{THINK_OPEN}{reasoning}{THINK_CLOSE}"
        else:
            text = THINK_CLOSE
        content = message.content.strip()
        if content:
            text += nl + content
        return text + self.render_tool_calls(message.tool_calls)

    def render_tool_results(self, results: Sequence[Message]) -> str:
        nl = self._nl
        return "<|observation|>" + "".join(f"{nl}<tool_response>{nl}{r.content}{nl}</tool_response>"
                                           for r in results)
