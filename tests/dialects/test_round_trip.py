"""parse(render(turn)) == turn and render(parse(text)) == text, for every dialect and random turns."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from zllm_core.dialects import dialect_named

from .strategies import SCOPE, tool_turns

# (dialect, generation starts inside reasoning, reasoning is part of the output)
MODES = [("hermes", False, True), ("hermes", True, True), ("glm45", False, True), ("glm47", True, True),
         ("glm47", False, True), ("dsml", True, True), ("dsml", False, False)]
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(data=tool_turns())
def test_parse_inverts_render(data):
    """One drawn turn checked in every mode (drawing dominates the cost)."""
    for name, in_reasoning, keeps_reasoning in MODES:
        message, tools = data
        if not keeps_reasoning:
            message = replace(message, reasoning=None)
        dialect = dialect_named(name)
        text = dialect.render_output(message, in_reasoning)
        parsed = dialect.parse(text, SCOPE, tools, in_reasoning)
        assert parsed.message() == message, (name, in_reasoning, text)
        assert not parsed.errors and not parsed.repairs
        assert dialect.render_output(parsed.message(), in_reasoning) == text


@pytest.mark.parametrize("name", ["glm45", "glm47", "dsml"])
def test_values_holding_the_closing_tag_are_printed_as_json(name):
    dialect = dialect_named(name)
    closer = "</｜DSML｜parameter>" if name == "dsml" else "</arg_value>"
    assert dialect.json_string(f"a{closer}b") == '"a\\u003c/' + closer[2:] + 'b"'
    assert dialect.json_string("plain <b> text") is None


def test_glm_keeps_the_models_spelling_of_json_values():
    dialect = dialect_named("glm45")
    text = '\n<think></think>\n<tool_call>run\n<arg_key>cmd</arg_key>\n<arg_value>["a",1]</arg_value>\n</tool_call>'
    parsed = dialect.parse(text, SCOPE)
    assert parsed.tool_calls[0].arguments == '{"cmd": ["a",1]}'
    assert dialect.render_output(parsed.message()) == text


def test_hermes_keeps_the_models_argument_text_and_trailing_newline():
    dialect = dialect_named("hermes")
    text = 'Sure.\n\n<tool_call>\n{"name": "f", "arguments": {"x":1,  "y" : [ ]}}\n</tool_call>'
    parsed = dialect.parse(text, SCOPE)
    assert parsed.content == "Sure.\n"
    assert parsed.tool_calls[0].arguments == '{"x":1,  "y" : [ ]}'
    assert dialect.render_output(parsed.message()) == text
