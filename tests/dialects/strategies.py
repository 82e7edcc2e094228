"""Hypothesis strategies for conversations that stress every dialect's delimiters."""
from __future__ import annotations

import json

from hypothesis import strategies as st

from zllm_core.dialects import FunctionTool, Message, ToolCall, tool_call_id
from zllm_core.dialects.events import Event, ReasoningDelta, TextDelta, ToolCallArgsDelta

# Text a value may contain: every dialect's own delimiters, other spellings of them, quotes, `</`.
TRICKY = ["</tool_call>", "<tool_call>", "</arg_value>", "<arg_value>", "</arg_key>", "</think>", "<think>",
          "</｜DSML｜parameter>", "<｜DSML｜invoke", "</｜DSML｜function_calls>", "</|DSML|parameter>",
          "&lt;/arg_value&gt;", "</ARG_VALUE>", '"', '\\"', "\\", "\n", "</", "<", "{", "}", "\\u003c",
          '"\\u003c/arg_value>"', "\u2028", "😀", "名"]
SCOPE = "req-7f3a"

names = st.from_regex(r"[\w.\-]{1,16}", fullmatch=True)
tricky_text = st.lists(st.one_of(st.text(max_size=4), st.sampled_from(TRICKY)), max_size=6).map("".join)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=False, allow_infinity=False), tricky_text)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(tricky_text, inner, max_size=3)), max_leaves=8)

# Free text must not contain tags (a template prints it raw, so no dialect could tell them apart).
_TAG_HINTS = ("<think", "</think", "<tool_call", "</tool_call", "<arg_", "</arg_", "dsml", "&lt;",
              "<｜", "<|", "<function", "\n\n<")
plain_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30).map(str.strip).filter(
    lambda s: not any(h in s.lower() for h in _TAG_HINTS))


def _schema_type(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return {str: "string", int: "integer", float: "number", list: "array", dict: "object"}[type(value)]


@st.composite
def tool_turns(draw, with_reasoning: bool = True) -> tuple[Message, tuple[FunctionTool, ...]]:
    """An assistant turn (canonical: the form a dialect renders) and the tools its calls use."""
    call_names = draw(st.lists(names, max_size=3, unique=True))
    calls, tools = [], []
    for index, name in enumerate(call_names):
        args = draw(st.dictionaries(names, json_values, max_size=4))
        calls.append(ToolCall(tool_call_id(SCOPE, index, name), name, json.dumps(args, ensure_ascii=False)))
        tools.append(FunctionTool(name, None, {"type": "object", "properties": {
            k: {"type": _schema_type(v)} for k, v in args.items()}}))
    reasoning = draw(plain_text.filter(bool) | st.none()) if with_reasoning else None
    return Message("assistant", draw(plain_text), reasoning, tuple(calls)), tuple(tools)


def coalesce(events: list[Event]) -> list[Event]:
    """Merge adjacent deltas of one kind: how events look when the text arrives whole."""
    out: list[Event] = []
    for ev in events:
        last = out[-1] if out else None
        if isinstance(ev, (TextDelta, ReasoningDelta)) and type(last) is type(ev):
            out[-1] = type(ev)(last.text + ev.text)
        elif isinstance(ev, ToolCallArgsDelta) and isinstance(last, ToolCallArgsDelta) and last.index == ev.index:
            out[-1] = ToolCallArgsDelta(ev.index, last.delta + ev.delta)
        else:
            out.append(ev)
    return out
