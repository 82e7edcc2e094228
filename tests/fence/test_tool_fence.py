"""Dialect tool fences (Hermes/ChatML JSON, GLM XML in its 4.5 and 4.7 layouts, DeepSeek DSML):
calls sampled from random logits parse back into calls valid under their tools' schemas, render
back to the same bytes, and respect tool_choice, parallel_tool_calls, the output budget and the
tokenizer's limits."""
import json

import jsonschema
import numpy as np
import pytest

from zllm_core.dialects import dsml, glm, hermes
from zllm_core.dialects.conversation import FunctionTool, Message, ToolCall
from zllm_core.dialects.selection import dialect_named
from zllm_core.fence.grammar import FenceError, FenceVocab, Grammar
from zllm_core.fence.token_fence import TokenFence
from zllm_core.fence.tool_grammar import DIALECT_GRAMMARS, output_grammar, tags_for
from zllm_core.protocols.canonical import ToolChoice

from .conftest import END_IDS, RandomLogits
from .schemas import AGENT_TOOLS, SUITE, as_parameter

TOOLS = [FunctionTool(name, f"the {name} tool", schema) for name, schema in AGENT_TOOLS.items()]
SCHEMAS = {t.name: t.parameters for t in TOOLS}
DIALECTS = ("hermes", "glm45", "glm47", "dsml")
TRIGGERS = {"hermes": hermes.CALL_OPEN, "glm45": glm.CALL_OPEN, "glm47": glm.CALL_OPEN, "dsml": dsml.CALLS_OPEN}
EXAMPLE = ToolCall("c", "get_time", '{"tz": "Europe/Paris"}')


_GRAMMARS = {}


def shortest_completion(dfa) -> bytes:
    """The bytes of one shortest path from the start to acceptance, by the DFA's distances."""
    state, out = dfa.start, bytearray()
    while not dfa.accepting[state]:
        b = next(b for b in range(256) if dfa.distance[dfa.table[state, dfa.classes[b]]] == dfa.distance[state] - 1)
        out.append(b)
        state = int(dfa.table[state, dfa.classes[b]])
    return bytes(out)


def fence(vocab, choice, tools=TOOLS, in_reasoning=False, max_tokens=160, dialect="hermes"):
    # compiled once per module, as a server does
    key = (dialect, choice, in_reasoning, json.dumps([(t.name, t.parameters) for t in tools]), id(vocab))
    if key not in _GRAMMARS:
        _GRAMMARS[key] = Grammar.compile(output_grammar(dialect, vocab, tools, choice, in_reasoning), vocab)
    return TokenFence(_GRAMMARS[key], max_tokens)


def after_prompt(dialect, calls) -> str:
    """A turn of calls as the dialect renders it, less the lead that the generation prompt holds
    (an empty turn's rendering: GLM's empty reasoning)."""
    lead = dialect.render_output(Message("assistant"))
    return dialect.render_output(Message("assistant", tool_calls=tuple(calls)))[len(lead):]


def call_head(dialect) -> str:
    """What every call of the dialect starts with, up to the function's name."""
    text = after_prompt(dialect, [EXAMPLE])
    return text[:text.index(EXAMPLE.name)]


@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("named", "todo_write"),
                                    ToolChoice("required", parallel=False)], ids=["required", "named", "one"])
@pytest.mark.parametrize("name", DIALECTS)
def test_forced_calls_parse_valid_and_render_back(name, choice, qwen, vocab_for):
    dialect = dialect_named(name)
    sampler = RandomLogits(seed=7)
    template = fence(vocab_for(name), choice, dialect=name)
    for k in range(200):
        tokens, ended = sampler.generate(template.clone())
        text = qwen.decode(tokens, errors="strict")
        parsed = dialect.parse(text, f"g{k}", TOOLS)
        assert ended and parsed.tool_calls and not parsed.errors and not parsed.content, text
        for call in parsed.tool_calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
            assert choice.mode != "named" or call.name == choice.name
        assert choice.parallel or len(parsed.tool_calls) == 1
        assert after_prompt(dialect, parsed.tool_calls) == text  # an echo never forks the prefix


@pytest.mark.parametrize("schema", sorted(SUITE))
@pytest.mark.parametrize("name", ["glm45", "glm47", "dsml"])  # Hermes prints JSON: test_json_fence's
def test_every_suite_schema_as_a_parameter_parses_valid(name, schema, qwen, vocab_for):
    dialect, tool = dialect_named(name), as_parameter(SUITE[schema])
    template = fence(vocab_for(name), ToolChoice("required", parallel=False), [tool], max_tokens=96, dialect=name)
    sampler = RandomLogits(seed=len(schema))
    for k in range(200):
        tokens, ended = sampler.generate(template.clone())
        text = qwen.decode(tokens, errors="strict")
        parsed = dialect.parse(text, f"s{k}", [tool])
        assert ended and len(parsed.tool_calls) == 1 and not parsed.errors, text
        jsonschema.validate(json.loads(parsed.tool_calls[0].arguments), tool.parameters)
        if name == "dsml":  # GLM prints anyOf strings raw, which its fence spells as JSON
            assert after_prompt(dialect, parsed.tool_calls) == text  # the echo does not fork


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


@pytest.mark.parametrize("name", ["glm45", "glm47", "dsml"])
def test_tag_tokens_fit_only_where_their_tags_go(name, qwen):
    """GLM's and DeepSeek's tokenizers have their tags as special tokens; Qwen's has only some,
    so the others are added here."""
    tags, base = tags_for(name), [qwen.token_bytes(i) for i in range(qwen.vocab_size)]
    added = [t for t in tags if t not in qwen.special_tokens]
    token_bytes = base + [t.encode() for t in added]
    ids = {**qwen.special_tokens, **{t: len(base) + i for i, t in enumerate(added)}}
    vocab = FenceVocab.build(token_bytes, ids, END_IDS, tags)
    assert set(vocab.pseudo) == set(tags)
    dialect, tools = dialect_named(name), [t for t in TOOLS if t.name == "get_weather"]
    template = fence(vocab, ToolChoice("required"), tools, max_tokens=64, dialect=name)
    text = after_prompt(dialect, [ToolCall("c", "get_weather", '{"city": "Paris"}')])
    f = template.clone()
    for t in qwen.encode(text[:text.index("Paris") + 3], disallowed_special=()):  # tags spelled out
        f.advance(t)
    inside = f.allowed()
    close = glm.VALUE_CLOSE if name.startswith("glm") else dsml.PARAM_CLOSE
    assert inside[ids[close]] and not any(inside[ids[t]] for t in tags if t != close)
    sampler, used = RandomLogits(seed=5), 0
    for k in range(50):
        tokens, ended = sampler.generate(template.clone())
        parsed = dialect.parse(b"".join(token_bytes[t] for t in tokens).decode(), f"t{k}", tools)
        assert ended and parsed.tool_calls and not parsed.errors
        used += sum(t >= len(base) or t in qwen.special_tokens.values() for t in tokens)
    assert used  # the tag tokens were taken


@pytest.mark.parametrize("name", DIALECTS)
def test_auto_branches_advance_together_and_die_when_left(name, qwen, vocab_for):
    tools = [t for t in TOOLS if t.name in ("get_weather", "get_time")]
    f = fence(vocab_for(name), ToolChoice("auto"), tools, dialect=name)
    assert f.allowed()[END_IDS[0]]  # free text may end at once
    call = after_prompt(dialect_named(name), [EXAMPLE])
    at = call.index("get_time") + len("get_")
    for t in qwen.encode("Let me check." + call[:at], disallowed_special=()):
        f.advance(t)
    both = f.allowed()
    assert both[qwen.encode("weather")[0]] and both[qwen.encode("time")[0]]
    for t in qwen.encode(call[at:call.index("tz")], disallowed_special=()):
        f.advance(t)
    allowed = f.allowed()
    assert allowed[qwen.encode("tz")[0]] and not allowed[qwen.encode("city")[0]]  # get_weather's branch died


@pytest.mark.parametrize("name", DIALECTS)
def test_auto_random_output_is_text_or_valid_calls(name, qwen, vocab_for):
    dialect = dialect_named(name)
    sampler = RandomLogits(seed=3)
    template = fence(vocab_for(name), ToolChoice("auto"), max_tokens=48, dialect=name)
    trigger = qwen.encode(call_head(dialect), allowed_special="all")
    for k in range(200):
        f = template.clone()
        prefix = trigger if k % 2 else []  # half the runs take the trigger at once
        for t in prefix:
            f.advance(t)
        tokens, ended = sampler.generate(f)
        text = qwen.decode(prefix + tokens)
        parsed = dialect.parse(text, f"a{k}", TOOLS)
        assert ended and not parsed.errors, text
        assert bool(prefix) == bool(parsed.tool_calls)
        for call in parsed.tool_calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


@pytest.mark.parametrize("name", DIALECTS)
def test_none_never_completes_the_trigger(name, qwen, vocab_for):
    template = fence(vocab_for(name), ToolChoice("none"), dialect=name)
    assert not template.allowed()[qwen.special_tokens["<tool_call>"]] or name == "dsml"
    trigger = TRIGGERS[name]
    for spelling in (trigger, trigger.upper(), trigger.replace("｜", "|")):  # the parsers take them all
        f = template.clone()
        for t in qwen.encode("text " + spelling[:-1], disallowed_special=()):
            f.advance(t)
        assert not f.violated and not f.allowed()[qwen.encode(">")[0]] and f.allowed()[qwen.encode("x")[0]]


@pytest.mark.parametrize("name", DIALECTS)
def test_a_budget_just_above_the_shortest_completion_still_ends_valid(name, qwen, vocab_for):
    vocab, dialect = vocab_for(name), dialect_named(name)
    tools = [t for t in TOOLS if t.name == "todo_write"]
    shortest = shortest_completion(fence(vocab, ToolChoice("required"), tools, dialect=name).grammar.dfa)
    for tag, pseudo in vocab.pseudo.items():  # a tag's special token is one pseudo byte there
        shortest = shortest.replace(bytes((pseudo,)), tag.encode())
    budget = len(qwen.encode(shortest.decode(), allowed_special="all")) + 2
    sampler = RandomLogits(seed=11)
    for k in range(30):
        tokens, ended = sampler.generate(fence(vocab, ToolChoice("required"), tools, max_tokens=budget + k % 3,
                                               dialect=name))
        parsed = dialect.parse(qwen.decode(tokens), "b", tools)
        assert ended and len(parsed.tool_calls) == 1 and not parsed.errors


@pytest.mark.parametrize("name", ["hermes", "glm47", "dsml"])  # whose generation prompts can open reasoning
def test_reasoning_first_then_the_call(name, qwen, vocab_for):
    dialect = dialect_named(name)
    template = fence(vocab_for(name), ToolChoice("required"), in_reasoning=True, max_tokens=320, dialect=name)
    f = template.clone()
    assert f.allowed()[qwen.encode("Thinking")[0]]
    for t in qwen.encode("I should call it.</think>" + DIALECT_GRAMMARS[name].after_reasoning.decode(),
                         disallowed_special=()):
        f.advance(t)
    assert not f.violated and f.allowed()[qwen.encode(call_head(dialect), allowed_special="all")[0]]
    assert not f.allowed()[qwen.encode("Sure")[0]]
    sampler = RandomLogits(seed=13)
    for k in range(20):
        tokens, ended = sampler.generate(template.clone())
        parsed = dialect.parse(qwen.decode(tokens), f"r{k}", TOOLS, in_reasoning=True)
        assert ended and parsed.tool_calls and not parsed.errors and not parsed.content


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


@pytest.mark.parametrize("name, missing", [("hermes", "<"), ("glm45", "<"), ("glm47", "<"), ("dsml", "<"),
                                           ("dsml", "\uff5c")])  # DSML's bar: three bytes, none spellable
def test_a_tokenizer_that_cannot_spell_a_tag_is_refused(name, missing):
    absent = set(missing.encode()[:1])
    vocab = FenceVocab.build([bytes([b]) for b in range(256) if b not in absent], {}, [])
    with pytest.raises(FenceError, match="cannot produce"):
        output_grammar(name, vocab, TOOLS[:1], ToolChoice("required"), False)


@pytest.mark.parametrize("name", DIALECTS)
def test_a_budget_below_the_shortest_completion_still_always_allows_a_token(name, vocab_for):
    sampler = RandomLogits(seed=2)
    for max_tokens in (1, 2, 3, 5):
        tokens, ended = sampler.generate(fence(vocab_for(name), ToolChoice("required"), max_tokens=max_tokens,
                                               dialect=name))
        assert len(tokens) == max_tokens and not ended  # cut by the budget, never an empty mask


@pytest.mark.parametrize("name", DIALECTS)
def test_a_coding_agents_tool_set_compiles_and_its_calls_parse_valid(name, qwen, vocab_for):
    """Twenty tools, as Claude Code or Codex declare: DSML's values in NFA form once passed the
    automaton limit (each value times every prefix of its closing tag's spellings)."""
    tools = [FunctionTool(f"{n}_{k}", None, s) for k in range(4) for n, s in AGENT_TOOLS.items()]
    dialect, sampler = dialect_named(name), RandomLogits(seed=20)
    template = fence(vocab_for(name), ToolChoice("required"), tools, max_tokens=200, dialect=name)
    for k in range(20):
        tokens, ended = sampler.generate(template.clone())
        parsed = dialect.parse(qwen.decode(tokens, errors="strict"), f"t{k}", tools)
        assert ended and parsed.tool_calls and not parsed.errors
        for call in parsed.tool_calls:
            jsonschema.validate(json.loads(call.arguments), AGENT_TOOLS[call.name.rsplit("_", 1)[0]])
