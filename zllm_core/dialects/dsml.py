"""DeepSeek DSML tool calls (V3.2): `<｜DSML｜function_calls>` / `invoke` / `parameter string="..."`.

Ground truth is DeepSeek's reference encoder (encoding_dsv32.py; the model ships no Jinja
template). The bar in the tags is U+FF5C. `string="true"` values are raw text, `string="false"`
values are JSON. Reasoning is `{r}</think>` after a prompt that ends in `<think>`.
"""
from __future__ import annotations

import json
import re
from typing import Sequence

from .conversation import FunctionTool, Message, ToolCall
from .dialect import ToolDialect
from .json_args import split_members, to_json
from .param_values import ParamParser, StringSafety
from .scanner import Markers, escaped_spellings
from .stream import THINK_CLOSE, THINK_OPEN

DSML = "｜DSML｜"
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
CALLS_OPEN, CALLS_CLOSE = f"<{DSML}function_calls>", f"</{DSML}function_calls>"
CALLS_START = "\n\n" + CALLS_OPEN  # the blank line belongs to the block, not to the text before it
INVOKE_OPEN, INVOKE_CLOSE = f"<{DSML}invoke", f"</{DSML}invoke>"
PARAM_OPEN, PARAM_CLOSE = f"<{DSML}parameter", f"</{DSML}parameter>"
TAG_END = ">"
RESULTS_OPEN, RESULTS_CLOSE = "\n\n<function_results>", "\n</function_results>"

TOOLS_TEMPLATE = """## Tools
You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{dsml}function_calls>" block like the following as part of your reply to the user:
<{dsml}function_calls>
<{dsml}invoke name="$FUNCTION_NAME">
<{dsml}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml}parameter>
...
</{dsml}invoke>
<{dsml}invoke name="$FUNCTION_NAME2">
...
</{dsml}invoke>
</{dsml}function_calls>
String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).
If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:
<{dsml}function_calls>
...
</{dsml}function_calls>
<function_results>
...
</function_results>
{think_open}...thinking about results{think_close}
Here are the functions available in JSONSchema format:
<functions>
{schemas}
</functions>
"""

_INVOKE_ATTRS = re.compile(r'\s*name\s*=\s*"([^"]*)"\s*')
_PARAM_ATTRS = re.compile(r'\s*name\s*=\s*"([^"]*)"\s+string\s*=\s*"(true|false)"\s*', re.IGNORECASE)


def _spellings(tag: str) -> list[str]:
    """Other letter case is matched anyway; also accept the ASCII bar and HTML-escaped forms."""
    forms = {tag, tag.replace("｜", "|")}
    return sorted({e for f in forms for e in (f, *escaped_spellings(f))} - {tag})


def _markers(*tags: str) -> Markers:
    spellings = {t: _spellings(t) for t in tags}
    if CALLS_START in spellings:
        spellings[CALLS_START] = ["\n\n" + s for s in _spellings(CALLS_OPEN)]
    return Markers(spellings)


_REASONING = _markers(THINK_CLOSE, EOS)
_CONTENT = _markers(CALLS_START, CALLS_OPEN, INVOKE_OPEN, THINK_OPEN, THINK_CLOSE,
                    CALLS_CLOSE, INVOKE_CLOSE, PARAM_CLOSE, EOS)
_BLOCK = _markers(INVOKE_OPEN, CALLS_CLOSE, INVOKE_CLOSE, EOS)
_ATTRS = _markers(TAG_END)
_BODY = _markers(PARAM_OPEN, INVOKE_CLOSE, INVOKE_OPEN, CALLS_CLOSE, EOS)
_VALUE = _markers(PARAM_CLOSE)
_AFTER = _markers(CALLS_START, CALLS_OPEN, CALLS_CLOSE, INVOKE_CLOSE, EOS)
_SAFETY = StringSafety(_VALUE)


class DsmlParser(ParamParser):
    reasoning_end = _REASONING
    value_end = _VALUE
    _safety = _SAFETY

    def __init__(self, scope: str, tools: Sequence[FunctionTool], in_reasoning: bool):
        super().__init__(scope, tools, in_reasoning)
        self._attrs = ""
        to_block, to_done = self._go(self._block_state), self._go(self._done_state)
        self._content_actions = {CALLS_START: to_block, CALLS_OPEN: self._calls_without_blank_line,
                                 INVOKE_OPEN: self._invoke_without_opener, THINK_OPEN: self._think_open,
                                 EOS: to_done}
        self._block_actions = {INVOKE_OPEN: self._open_invoke, CALLS_CLOSE: self._go(self._after_state),
                               EOS: self._eos_in_block}
        self._after_actions = {EOS: to_done, CALLS_START: to_block, CALLS_OPEN: to_block}

    def _end_reasoning(self, tag: str) -> None:
        self._state = self._done_state if tag == EOS else self._content_state

    def _content_state(self) -> bool:
        return self._dispatch(_CONTENT, self.content.write, self._content_actions)

    def _calls_without_blank_line(self) -> None:
        self._repair("layout", "tool calls not preceded by a blank line")
        self._state = self._block_state

    def _invoke_without_opener(self) -> None:
        self._repair("missing_opener", f"{CALLS_OPEN!r} missing before {INVOKE_OPEN!r}")
        self._open_invoke()

    def _block_state(self) -> bool:
        return self._dispatch(_BLOCK, self._layout_text, self._block_actions)

    def _eos_in_block(self) -> None:
        self._repair("missing_closer", f"{CALLS_CLOSE!r} missing at the end")
        self._state = self._done_state

    def _open_invoke(self) -> None:
        self._attrs = ""
        self._state = self._invoke_attrs_state

    def _invoke_attrs_state(self) -> bool:
        text, tag = self._scan(_ATTRS)
        self._attrs += text
        if tag is None:
            return False
        m = _INVOKE_ATTRS.fullmatch(self._attrs)
        if m is None:
            self._error("malformed_tool_call", f"cannot read invoke attributes {self._attrs[:80]!r}")
            self._skipping = True
        else:
            self._start_call(m.group(1))
        self._state = self._after_value_state
        return True

    def _after_value_state(self) -> bool:
        """Inside an invoke, after its name or a value: another parameter or the end."""
        text, tag = self._scan(_BODY)
        self._layout_text(text)
        if tag is None:
            return False
        if tag.tag == PARAM_OPEN:
            self._attrs = ""
            self._state = self._param_attrs_state
            return True
        self._finish_call()
        self._state = self._block_state
        if tag.tag == INVOKE_CLOSE:
            return True
        self._repair("missing_closer", f"{INVOKE_CLOSE!r} missing")
        if tag.tag == INVOKE_OPEN:
            self._open_invoke()
        else:
            self._state = self._after_state if tag.tag == CALLS_CLOSE else self._done_state
        return True

    def _param_attrs_state(self) -> bool:
        text, tag = self._scan(_ATTRS)
        self._attrs += text
        if tag is None:
            return False
        m = _PARAM_ATTRS.fullmatch(self._attrs)
        if m is None:
            self._problem = f"cannot read parameter attributes {self._attrs[:80]!r}"
            self._begin_value("", "json")
        else:
            self._begin_value(m.group(1), "string" if m.group(2).lower() == "true" else "json")
        return True

    def _after_state(self) -> bool:
        return self._dispatch(_AFTER, self._text_after_calls, self._after_actions)

    def _done_state(self) -> bool:
        if self._buf.strip():
            self._repair("layout", "text after the end of sentence token (dropped)")
            self._state = self._drop_state
        self._buf = ""
        return False

    def _drop_state(self) -> bool:
        self._buf = ""
        return False

    def _at_end(self) -> None:
        if self._state == self._invoke_attrs_state:
            self._error("unterminated_tool_call", "generation ended inside a tool call")
        elif self._state == self._block_state:
            self._repair("missing_closer", f"{CALLS_CLOSE!r} missing at the end")
        super()._at_end()


class DsmlDialect(ToolDialect):
    name = "dsml"
    text_stops = _markers(CALLS_OPEN, INVOKE_OPEN, EOS)  # free text ends at the end of sentence too
    reasoning_prompt_suffix = THINK_OPEN
    parser_class = DsmlParser

    def render_tools(self, tools: Sequence[FunctionTool]) -> str:
        schemas = "\n".join(to_json(t.openai_dict()["function"]) for t in tools)
        return TOOLS_TEMPLATE.format(dsml=DSML, schemas=schemas, think_open=THINK_OPEN, think_close=THINK_CLOSE)

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        return CALLS_OPEN + "\n" + "\n".join(map(self._render_call, calls)) + "\n" + CALLS_CLOSE

    def _render_call(self, call: ToolCall) -> str:
        members = split_members(call.arguments)
        if members is None:
            raise ValueError(f"tool call {call.name!r}: arguments are not a JSON object")
        params = "\n".join(self._render_param(k, raw) for k, raw in members)
        return f'{INVOKE_OPEN} name="{call.name}">\n{params}\n{INVOKE_CLOSE}'

    def _render_param(self, key: str, raw: str) -> str:
        value, is_string = self.json_value(raw), "false"
        if raw.startswith('"'):
            text = json.loads(raw)
            escaped = self.json_string(text)
            value, is_string = (text, "true") if escaped is None else (escaped, "false")
        return f'{PARAM_OPEN} name="{key}" string="{is_string}">{value}{PARAM_CLOSE}'

    def json_string(self, value: str) -> str | None:
        return _SAFETY.json_string(value)

    def json_value(self, raw: str) -> str:
        return _SAFETY.json_value(raw)

    def render_output(self, message: Message, in_reasoning: bool = False) -> str:
        text = f"{message.reasoning or ''}{THINK_CLOSE}" if in_reasoning else ""
        text += message.content
        if message.tool_calls:
            text += "\n\n" + self.render_tool_calls(message.tool_calls)
        return text

    def render_result(self, content: str) -> str:
        return f"\n<result>{content}</result>"

    def render_tool_results(self, results: Sequence[Message]) -> str:
        return RESULTS_OPEN + "".join(self.render_result(r.content) for r in results) + RESULTS_CLOSE
