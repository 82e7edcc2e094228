"""Dialect tool fences (Hermes/ChatML JSON): calls sampled from random logits parse back into
calls valid under their tools' schemas, render back to the same bytes, and respect tool_choice,
parallel_tool_calls, the output budget and the tokenizer's limits."""
import json

import jsonschema
import numpy as np
import pytest

from zllm_core.dialects.conversation import FunctionTool
from zllm_core.dialects.selection import dialect_named
from zllm_core.fence.grammar import FenceError, FenceVocab, Grammar
from zllm_core.fence.token_fence import TokenFence
from zllm_core.fence.tool_grammar import output_grammar
from zllm_core.protocols.canonical import ToolChoice

from .conftest import END_IDS, RandomLogits
from .schemas import AGENT_TOOLS

TOOLS = [FunctionTool(name, f"the {name} tool", schema) for name, schema in AGENT_TOOLS.items()]
SCHEMAS = {t.name: t.parameters for t in TOOLS}
HERMES = dialect_named("hermes")


_GRAMMARS = {}


def shortest_completion(dfa) -> bytes:
    """The bytes of one shortest path from the start to acceptance, by the DFA's distances."""
    state, out = dfa.start, bytearray()
    while not dfa.accepting[state]:
        b = next(b for b in range(256) if dfa.distance[dfa.table[state, dfa.classes[b]]] == dfa.distance[state] - 1)
        out.append(b)
        state = int(dfa.table[state, dfa.classes[b]])
    return bytes(out)


def fence(vocab, choice, tools=TOOLS, in_reasoning=False, max_tokens=160):
    key = (choice, tuple(t.name for t in tools), in_reasoning)  # compiled once per module, as a server does
    if key not in _GRAMMARS:
        _GRAMMARS[key] = Grammar.compile(output_grammar("hermes", vocab, tools, choice, in_reasoning), vocab)
    return TokenFence(_GRAMMARS[key], max_tokens)


@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("named", "todo_write"),
                                    ToolChoice("required", parallel=False)], ids=["required", "named", "one"])
def test_forced_calls_parse_valid_and_render_back(choice, qwen, vocab):
    sampler = RandomLogits(seed=7)
    template = fence(vocab, choice)
    for k in range(200):
        tokens, ended = sampler.generate(template.clone())
        text = qwen.decode(tokens, errors="strict")
        parsed = HERMES.parse(text, f"g{k}", TOOLS)
        assert ended and parsed.tool_calls and not parsed.errors and not parsed.content, text
        for call in parsed.tool_calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
            assert choice.mode != "named" or call.name == choice.name
        assert choice.parallel or len(parsed.tool_calls) == 1
        assert HERMES.render_tool_calls(parsed.tool_calls) == text  # an echo never forks the prefix


def test_the_tag_special_token_fits_only_where_the_tag_goes(qwen, vocab):
    f = fence(vocab, ToolChoice("required"))
    open_id = qwen.special_tokens["<tool_call>"]
    assert f.allowed()[open_id] and not f.allowed()[END_IDS[0]]
    f.advance(open_id)
    for t in qwen.encode('\n{"name": "get_weather", "arguments": {"city": "'):
        f.advance(t)
    inside = f.allowed()
    assert not inside[open_id] and not inside[qwen.special_tokens["</tool_call>"]]
    assert not inside[END_IDS[0]] and inside[qwen.encode("Paris")[0]]


def test_auto_branches_advance_together_and_die_when_left(qwen, vocab):
    tools = [t for t in TOOLS if t.name in ("get_weather", "get_time")]
    f = fence(vocab, ToolChoice("auto"), tools)
    assert f.allowed()[END_IDS[0]]  # free text may end at once
    for t in qwen.encode("Let me check.\n<tool_call>\n{\"name\": \"get_", disallowed_special=()):
        f.advance(t)
    both = f.allowed()
    assert both[qwen.encode("weather")[0]] and both[qwen.encode("time")[0]]
    for t in qwen.encode('time", "arguments": {"'):
        f.advance(t)
    allowed = f.allowed()
    assert allowed[qwen.encode("tz")[0]] and not allowed[qwen.encode("city")[0]]  # get_weather's branch died


def test_auto_random_output_is_text_or_valid_calls(qwen, vocab):
    sampler = RandomLogits(seed=3)
    template = fence(vocab, ToolChoice("auto"), max_tokens=48)
    open_id = qwen.special_tokens["<tool_call>"]
    for k in range(200):
        f = template.clone()
        prefix = [open_id] if k % 2 else []  # half the runs take the trigger at once
        for t in prefix:
            f.advance(t)
        tokens, ended = sampler.generate(f)
        text = qwen.decode(prefix + tokens)
        parsed = HERMES.parse(text, f"a{k}", TOOLS)
        assert ended and not parsed.errors, text
        assert bool(prefix) == bool(parsed.tool_calls)
        for call in parsed.tool_calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_none_never_completes_the_trigger(qwen, vocab):
    f = fence(vocab, ToolChoice("none"))
    assert not f.allowed()[qwen.special_tokens["<tool_call>"]]
    for t in qwen.encode("text <tool_call", disallowed_special=()):
        f.advance(t)
    assert not f.allowed()[qwen.encode(">")[0]] and f.allowed()[qwen.encode("x")[0]]


def test_a_budget_just_above_the_shortest_completion_still_ends_valid(qwen, vocab):
    tools = [t for t in TOOLS if t.name == "todo_write"]
    shortest = shortest_completion(fence(vocab, ToolChoice("required"), tools).grammar.dfa)
    for tag, pseudo in vocab.pseudo.items():  # a tag's special token is one pseudo byte there
        shortest = shortest.replace(bytes((pseudo,)), tag.encode())
    budget = len(qwen.encode(shortest.decode(), allowed_special="all")) + 2
    sampler = RandomLogits(seed=11)
    for k in range(30):
        tokens, ended = sampler.generate(fence(vocab, ToolChoice("required"), tools, max_tokens=budget + k % 3))
        parsed = HERMES.parse(qwen.decode(tokens), "b", tools)
        assert ended and len(parsed.tool_calls) == 1 and not parsed.errors


def test_reasoning_first_then_the_call(qwen, vocab):
    f = fence(vocab, ToolChoice("required"), in_reasoning=True)
    assert f.allowed()[qwen.encode("Thinking")[0]]
    for t in qwen.encode("I should call it.\n</think>\n\n", disallowed_special=()):
        f.advance(t)
    assert not f.violated and f.allowed()[qwen.special_tokens["<tool_call>"]]
    assert not f.allowed()[qwen.encode("Sure")[0]]


def test_clone_and_rollback_leave_the_committed_state(qwen, vocab):
    f = fence(vocab, ToolChoice("required"))
    f.advance(qwen.special_tokens["<tool_call>"])
    draft = f.clone()
    for t in qwen.encode('\n{"name": "run'):
        draft.advance(t)
    assert f.state != draft.state
    draft.rollback(len(qwen.encode('\n{"name": "run')))
    assert draft.state == f.state
    assert np.array_equal(draft.bitmask(), f.bitmask())


def test_a_tokenizer_that_cannot_spell_a_tag_is_refused():
    letters = [bytes([b]) for b in range(256) if b != ord("<")]  # no byte fallback for '<'
    vocab = FenceVocab.build(letters, {}, [])
    with pytest.raises(FenceError, match="cannot produce"):
        output_grammar("hermes", vocab, TOOLS[:1], ToolChoice("required"), False)


def test_a_budget_below_the_shortest_completion_still_always_allows_a_token(qwen, vocab):
    sampler = RandomLogits(seed=2)
    for max_tokens in (1, 2, 3, 5):
        tokens, ended = sampler.generate(fence(vocab, ToolChoice("required"), max_tokens=max_tokens))
        assert len(tokens) == max_tokens and not ended  # cut by the budget, never an empty mask
