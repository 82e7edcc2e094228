"""Malformed output becomes a structured error or plain text, never an exception; repairs are counted."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zllm_core.dialects import ParseError, TextDelta, ToolCallEnd, ToolCallStart, dialect_named

from .sample import FIRST_CALLS, TOOLS
from .strategies import SCOPE, TRICKY

MODES = [("hermes", False), ("glm45", False), ("glm47", True), ("dsml", True)]


def events_of(name, text, in_reasoning=False):
    parser = dialect_named(name).stream_parser(SCOPE, TOOLS, in_reasoning)
    return parser, parser.feed(text) + parser.finish()


def test_call_cut_off_at_max_tokens_is_reported_unterminated():
    for name, in_reasoning in MODES:
        text = dialect_named(name).render_output(FIRST_CALLS, in_reasoning)
        cut = text.rindex("setup.py") + 3  # inside the second call's arguments
        parsed = dialect_named(name).parse(text[:cut], SCOPE, TOOLS, in_reasoning)
        assert [e.kind for e in parsed.errors] == ["unterminated_tool_call"], name
        assert parsed.errors[0].index == 1
        assert [c.name for c in parsed.tool_calls] == ["list_dir"]


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(0, 10_000))
def test_any_truncation_parses_without_raising(cut):
    for name, in_reasoning in MODES:
        text = dialect_named(name).render_output(FIRST_CALLS, in_reasoning)
        parsed = dialect_named(name).parse(text[:cut % (len(text) + 1)], SCOPE, TOOLS, in_reasoning)
        assert all(isinstance(e, ParseError) for e in parsed.errors)


@settings(max_examples=80, deadline=None)
@given(text=st.lists(st.one_of(st.text(max_size=3), st.sampled_from(TRICKY + ["<tool_call>\n{", "<arg_key>",
                                                                               '" string="', "name=\"", ">"])),
                     max_size=12).map("".join))
def test_garbage_never_raises(text):
    for name, in_reasoning in MODES:
        dialect_named(name).parse(text, SCOPE, TOOLS, in_reasoning)
        dialect_named(name).parse(text, SCOPE, (), not in_reasoning)


def test_unicode_case_folding_in_tags_is_a_repair_not_a_crash():
    parsed = dialect_named("hermes").parse("<thİnk>\nhm\n</THİNK>\n\nok", SCOPE)
    assert (parsed.reasoning, parsed.content) == ("hm", "ok")
    assert [r.kind for r in parsed.repairs] == ["case", "case"]


def test_invalid_json_in_a_non_string_parameter_is_an_error():
    cases = {
        "hermes": '<tool_call>\n{"name": "read_file", "arguments": {"path": "a", "limit": 4O}}\n</tool_call>',
        "glm45": "<tool_call>read_file\n<arg_key>limit</arg_key>\n<arg_value>4O</arg_value>\n</tool_call>",
        "dsml": '\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="read_file">\n'
                '<｜DSML｜parameter name="limit" string="false">[4,</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
                '</｜DSML｜function_calls>',
    }
    for name, text in cases.items():
        _, events = events_of(name, text)
        errors = [e for e in events if isinstance(e, ParseError)]
        assert [(e.kind, e.index) for e in errors] == [("invalid_arguments", 0)], name
        assert not any(isinstance(e, ToolCallEnd) for e in events)


def test_unknown_function_is_an_error_and_later_calls_keep_their_index():
    text = ('<tool_call>\n{"name": "rm_rf", "arguments": {"path": "/"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "list_dir", "arguments": {"path": "."}}\n</tool_call>')
    _, events = events_of("hermes", text)
    assert [e.kind for e in events if isinstance(e, ParseError)] == ["unknown_function"]
    assert [(e.index, e.name) for e in events if isinstance(e, ToolCallStart)] == [(0, "list_dir")]


def test_tolerated_spellings_are_repaired_and_counted():
    parser, events = events_of("hermes", 'Hi</tool_call> <TOOL_CALL>\n{"name": "list_dir", "arguments": {}}\n'
                                         '&lt;/tool_call&gt;')
    assert parser.repairs == {"stray_closing_tag": 1, "case": 1, "escaped_tag": 1}
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["list_dir"]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hi "


def test_escaped_tags_in_prose_stay_prose():
    text = "Wrap calls in &lt;tool_call&gt; tags."
    for name in ("hermes", "glm45"):
        parsed = dialect_named(name).parse(text, SCOPE, TOOLS)
        assert (parsed.content, parsed.tool_calls, parsed.repairs) == (text, [], [])


def test_dsml_ascii_bar_and_missing_opener_are_repaired():
    text = ('ok<|DSML|invoke name="list_dir">\n<｜dsml｜parameter name="path" string="true">.</｜DSML｜parameter>\n'
            '</｜DSML｜invoke>\n</｜DSML｜function_calls>')
    parser, events = events_of("dsml", text)
    assert parser.repairs == {"escaped_tag": 1, "missing_opener": 1, "case": 1}
    parsed = dialect_named("dsml").parse(text, SCOPE, TOOLS)
    assert (parsed.content, parsed.tool_calls[0].arguments) == ("ok", '{"path": "."}')


def test_hermes_envelope_with_arguments_first_is_accepted_as_a_layout_repair():
    parsed = dialect_named("hermes").parse(
        '<tool_call>\n{"arguments": {"path": "."}, "name": "list_dir"}\n</tool_call>', SCOPE, TOOLS)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("list_dir", '{"path": "."}')]
    assert [r.kind for r in parsed.repairs] == ["layout"]
