"""Conversation values: what protocols hand to the dialects."""
from __future__ import annotations

from zllm_core.dialects import FunctionTool, arguments_text, dialect_named


def test_returned_object_keeps_the_text_we_emitted():
    emitted = '{"cmd": ["a",1], "n": 1.50}'
    assert arguments_text({"cmd": ["a", 1], "n": 1.5}, emitted) == emitted


def test_changed_object_is_serialized_like_parsed_arguments():
    assert arguments_text({"n": True, "s": "é"}, '{"n": 1, "s": "é"}') == '{"n": true, "s": "é"}'
    assert arguments_text({"x": 1}) == '{"x": 1}'
    assert arguments_text({"x": 1}, "not json") == '{"x": 1}'


def test_tool_without_description_omits_it_from_the_prompt():
    tool = FunctionTool("f", None, {"type": "object"})
    assert tool.openai_dict() == {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    assert '"description"' not in dialect_named("hermes").render_tools([tool])


def test_parameter_type_reads_single_schema_types_only():
    tool = FunctionTool("f", None, {"properties": {"a": {"type": "string"}, "b": {"type": ["string", "null"]}}})
    assert (tool.parameter_type("a"), tool.parameter_type("b"), tool.parameter_type("c")) == ("string", None, None)
