"""JsonSchemaFence: every generation sampled from random logits is valid under its schema and
ends with an end token inside its budget; schemas the fence cannot enforce fail fast."""
import json

import jsonschema
import pytest

from zllm_core.fence.automaton import compile_dfa
from zllm_core.fence.grammar import Grammar
from zllm_core.fence.json_schema import UnsupportedSchema, value_expr
from zllm_core.fence.token_fence import TokenFence
from zllm_core.fence.tool_grammar import json_grammar

from .conftest import RandomLogits
from .schemas import AGENT_TOOLS, KEYWORDS, SUITE



@pytest.mark.parametrize("name", sorted(SUITE))
def test_200_random_generations_are_valid_and_end_in_budget(name, qwen, vocab):
    schema = SUITE[name]
    grammar = Grammar.compile(json_grammar(schema, False, vocab), vocab)
    sampler = RandomLogits(seed=len(name))
    for _ in range(200):
        tokens, ended = sampler.generate(TokenFence(grammar, max_tokens=96))
        text = qwen.decode(tokens, errors="strict")
        assert ended, f"no end token within the budget: {text!r}"
        jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("value, schema", [
    ({"path": "a.py", "edits": [{"old_string": "x\n\"y\"", "new_string": "z", "replace_all": True}]},
     AGENT_TOOLS["edit_file"]),
    ({"todos": [{"content": "ünïcødé ✓", "status": "completed", "priority": None}]}, AGENT_TOOLS["todo_write"]),
    ({"i": -25, "e": 8, "n": 3}, KEYWORDS["bounds"]),
    ("ab-12.py", KEYWORDS["pattern"]),
    ("\u0001\t", KEYWORDS["escapes"]),
])
def test_json_dumps_of_valid_values_is_accepted(value, schema):
    dfa = compile_dfa(value_expr(schema))
    assert dfa.accepting[dfa.step(dfa.start, json.dumps(value, ensure_ascii=False).encode())]


@pytest.mark.parametrize("value, schema", [
    ({"i": 131, "e": 8, "n": 1}, KEYWORDS["bounds"]), ({"i": 0, "e": 9, "n": 1}, KEYWORDS["bounds"]),
    ("ab-", KEYWORDS["pattern"]), ([True], KEYWORDS["items"]), ("a", KEYWORDS["lengths"]),
    ({"a": "x"}, KEYWORDS["object"]),
])
def test_invalid_values_are_refused(value, schema):
    dfa = compile_dfa(value_expr(schema))
    assert not dfa.accepting[dfa.step(dfa.start, json.dumps(value).encode())]


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "integer", "multipleOf": 3}, "multipleOf"),
    ({"not": {"type": "string"}}, "not"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "string", "pattern": "(?=a)b"}, "pattern"),
    ({"type": "string", "pattern": "(a)\\1"}, "pattern"),
    ({"$ref": "#/$defs/x", "$defs": {"x": {"$ref": "#/$defs/x"}}}, "$ref"),
    ({"type": "objekt"}, "type"),
])
def test_unenforceable_schemas_name_the_keyword(schema, keyword):
    with pytest.raises(UnsupportedSchema) as e:
        value_expr(schema)
    assert e.value.keyword == keyword


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "string", "minLength": 100000}, "minLength"),
    ({"type": "array", "minItems": 5000}, "minItems"),
    ({"type": "integer", "minimum": float("-inf")}, "minimum"),
    ({"type": "string", "pattern": "[\\"}, "pattern"),
    ({"type": "string", "pattern": "^\\S+$"}, "pattern"),
])
def test_hostile_schemas_are_refused_quickly(schema, keyword):
    with pytest.raises(UnsupportedSchema) as e:
        value_expr(schema)
    assert e.value.keyword == keyword


def test_nested_repetition_past_the_state_limit_is_refused():
    nested = {"type": "array", "minItems": 16, "maxItems": 16,
              "items": {"type": "array", "minItems": 16, "maxItems": 16,
                        "items": {"type": "string", "minLength": 300, "maxLength": 300}}}
    with pytest.raises(ValueError, match="too large"):
        compile_dfa(value_expr(nested))


@pytest.mark.parametrize("schema, good, bad", [
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a"],
      "anyOf": [{"required": ["b"]}]}, {"a": 1, "b": 2}, {"b": 1}),
    ({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2}, "ab", "abc"),
    ({"type": "string", "enum": ["a", 1]}, "a", 1),
    ({"type": "string", "pattern": "^\\u0041[\\b]$"}, "A\b", "u0041b"),
])
def test_keywords_beside_subschemas_all_hold(schema, good, bad):
    dfa = compile_dfa(value_expr(schema))
    assert dfa.accepting[dfa.step(dfa.start, json.dumps(good).encode())]
    assert not dfa.accepting[dfa.step(dfa.start, json.dumps(bad).encode())]
