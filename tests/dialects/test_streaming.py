"""Streaming: any split of the text gives the events of the whole text; no tag ever leaks."""
from __future__ import annotations

import codecs

from hypothesis import given, settings
from hypothesis import strategies as st

from zllm_core.dialects import (Message, ReasoningDelta, TextDelta, ToolCall, ToolCallArgsDelta, ToolCallStart,
                                dialect_named, tool_call_id)

from .sample import TOOLS
from .strategies import SCOPE, coalesce, tool_turns

MODES = [("hermes", False), ("hermes", True), ("glm45", False), ("glm47", True), ("dsml", True), ("dsml", False)]
HAIRY = Message("assistant", "Checking a < b && c </ d (名前).\nThen:", "Think <b>hard</b>\nabout </thinking> it", (
    ToolCall(tool_call_id(SCOPE, 0, "read_file"), "read_file",
             '{"path": "x</tool_call></arg_value></｜DSML｜parameter>\\n", "limit": 3}'),
    ToolCall(tool_call_id(SCOPE, 1, "run"), "run", '{"cmd": ["echo", "<tool_call>"], "env": {"A": "</"}}'),
))


def whole(name, in_reasoning, text, tools=TOOLS):
    parser = dialect_named(name).stream_parser(SCOPE, tools, in_reasoning)
    return coalesce(parser.feed(text) + parser.finish())


def pieces(name, in_reasoning, chunks, tools=TOOLS):
    """Feed chunk by chunk, checking after every feed that released text is final text."""
    parser = dialect_named(name).stream_parser(SCOPE, tools, in_reasoning)
    final = whole(name, in_reasoning, "".join(chunks), tools)
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
        assert_only_final_text(events, final)
    return coalesce(events + parser.finish())


def assert_only_final_text(sofar, final):
    for kind in (TextDelta, ReasoningDelta):
        released = "".join(e.text for e in sofar if isinstance(e, kind))
        assert "".join(e.text for e in final if isinstance(e, kind)).startswith(released)


def test_every_split_point_gives_the_same_events():
    for name, in_reasoning in MODES:
        message = HAIRY if name != "dsml" or in_reasoning else Message("assistant", HAIRY.content, None, HAIRY.tool_calls)
        text = dialect_named(name).render_output(message, in_reasoning)
        expected = whole(name, in_reasoning, text)
        for cut in range(len(text) + 1):
            assert pieces(name, in_reasoning, [text[:cut], text[cut:]]) == expected, (name, cut)
        assert pieces(name, in_reasoning, list(text)) == expected


def test_every_byte_boundary_through_an_incremental_utf8_decoder():
    """Detokenizers release bytes; text deltas come from an incremental decoder, split anywhere."""
    for name, in_reasoning in (("dsml", True), ("glm47", True)):
        data = dialect_named(name).render_output(HAIRY, in_reasoning).encode()
        expected = whole(name, in_reasoning, data.decode())
        for cut in range(len(data) + 1):
            decoder = codecs.getincrementaldecoder("utf-8")()
            chunks = [decoder.decode(data[:cut]), decoder.decode(data[cut:], final=True)]
            assert pieces(name, in_reasoning, chunks) == expected


@settings(max_examples=60, deadline=None)
@given(data=tool_turns(), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_random_splits_give_the_same_events(data, cuts):
    message, tools = data
    for name, in_reasoning in MODES:
        m = message if name != "dsml" or in_reasoning else Message("assistant", message.content, None, message.tool_calls)
        text = dialect_named(name).render_output(m, in_reasoning)
        bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
        chunks = [text[a:b] for a, b in zip(bounds, bounds[1:])]
        assert pieces(name, in_reasoning, chunks, tools) == whole(name, in_reasoning, text, tools)


def test_a_possible_tag_is_held_until_decided():
    parser = dialect_named("hermes").stream_parser(SCOPE)
    assert parser.feed("Hello <tool") == [TextDelta("Hello ")]
    assert parser.feed("box>") == [TextDelta("<toolbox>")]
    assert parser.feed(" <tool_ca") == [TextDelta(" ")]
    assert parser.finish() == [TextDelta("<tool_ca")]


def test_argument_deltas_stream_before_the_call_ends():
    parser = dialect_named("glm47").stream_parser(SCOPE, TOOLS, in_reasoning=False)
    events = parser.feed("</think><tool_call>read_file<arg_key>path</arg_key><arg_value>src/ma")
    assert isinstance(events[0], ToolCallStart)
    assert "".join(e.delta for e in events if isinstance(e, ToolCallArgsDelta)) == '{"path": "src/ma'


def test_call_ids_hash_scope_index_and_name():
    ids = {tool_call_id("a", 0, "f"), tool_call_id("b", 0, "f"), tool_call_id("a", 1, "f"), tool_call_id("a", 0, "g")}
    assert len(ids) == 4
    assert tool_call_id("a", 0, "f") == tool_call_id("a", 0, "f")
    twice = dialect_named("hermes").parse(
        '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "f", "arguments": {}}\n'
        '</tool_call>', SCOPE)
    assert twice.tool_calls[0].id != twice.tool_calls[1].id
