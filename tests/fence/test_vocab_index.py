"""The native vocabulary walks (over the trie, and from a loop state) equal stepping the DFA
token by token, and the on-disk layout cache is validated before use."""
import numpy as np
import pytest

from zllm_core.fence.automaton import compile_dfa
from zllm_core.fence.bitmask import unpack
from zllm_core.fence.grammar import FenceVocab, Grammar
from zllm_core.fence.json_schema import value_expr
from zllm_core.fence.vocab_index import NO_LIMIT, VocabIndex

SCHEMA = {"type": "object", "properties": {"p": {"type": "string", "maxLength": 3}, "n": {"type": "integer"},
                                           "s": {"type": "string"}},
          "required": ["p"]}
PREFIXES = (b"", b'{"p": "', b'{"p": "ab', b'{"p": "abc"', b'{"p": "a", "n": 1', b'{"p": "a", "s": "',
            b'{"p": "a", "s": "x\xe4\xb8')


@pytest.fixture(scope="module")
def walked(qwen):
    tokens = [qwen.token_bytes(i) for i in range(qwen.vocab_size)]
    return tokens, VocabIndex.build(tokens, excluded=[151643]), compile_dfa(value_expr(SCHEMA))


def reference(dfa, state, tokens, ids, limit):
    """(allowed ids among `ids`, the fewest bytes any living one leaves) by stepping each token."""
    allowed, closest = set(), None
    for i in ids:
        end = dfa.step(state, tokens[i])
        if end != dfa.dead:
            left = int(dfa.distance[end])
            closest = left if closest is None else min(closest, left)
            if left <= limit:
                allowed.add(int(i))
    return allowed, closest


@pytest.mark.parametrize("limit", [NO_LIMIT, 6, 0])
def test_the_trie_walk_equals_stepping_each_token(walked, limit):
    tokens, index, dfa = walked
    sample = index.order[::97]  # across lengths and scripts
    for text in PREFIXES:
        state = dfa.step(dfa.start, text)
        row = index.row(dfa, state, limit)
        allowed = unpack(row.words, index.vocab_size)
        want, closest = reference(dfa, state, tokens, sample, limit)
        assert {int(i) for i in sample if allowed[i]} == want, text
        if closest is not None:  # the whole vocabulary may hold a closer token than the sample
            assert 0 <= row.closest <= closest
    assert not unpack(index.row(dfa, dfa.start, NO_LIMIT).words, index.vocab_size)[151643]


@pytest.mark.parametrize("utf8", [True, False])
def test_the_loop_walk_equals_the_trie_walk_inside_a_string(walked, utf8):
    tokens, index, dfa = walked
    for text in (b'{"p": "a", "s": "', b'{"p": "a", "s": "xy'):
        state = dfa.step(dfa.start, text)
        ascii_loop = (dfa.table[state, dfa.classes[:128]] == state).astype(np.uint8).tobytes()
        for limit in (NO_LIMIT, 3, -1):
            by_trie, by_loop = index.row(dfa, state, limit), index.row(dfa, state, limit, (ascii_loop, utf8))
            assert np.array_equal(by_trie.words, by_loop.words) and by_trie.closest == by_loop.closest


def test_grammar_rows_take_the_loop_walk_where_it_applies(qwen):
    vocab = FenceVocab.build([qwen.token_bytes(i) for i in range(qwen.vocab_size)], qwen.special_tokens, [151643])
    grammar = Grammar.compile(value_expr(SCHEMA), vocab)
    inside = grammar.dfa.step(grammar.dfa.start, b'{"p": "a", "s": "')
    assert grammar._loops[inside][1]  # every whole character returns inside a free string
    counted = grammar.dfa.step(grammar.dfa.start, b'{"p": "')
    assert grammar._loops[counted] is None  # maxLength counts characters: none returns
    tokens = vocab.index.token_bytes
    for state in (inside, counted):
        allowed = unpack(grammar.bitmask(state), vocab.vocab_size)
        for i in vocab.index.order[::211]:
            assert allowed[i] == (grammar.dfa.step(state, tokens[i]) != grammar.dfa.dead), tokens[i]


def test_a_damaged_cache_file_is_rebuilt(tmp_path, qwen):
    tokens = [qwen.token_bytes(i) for i in range(1000)]
    first = VocabIndex.cached(tokens, cache_dir=tmp_path)
    (cached,) = (tmp_path / "fence").glob("vocab-*.npz")
    cached.write_bytes(b"not a numpy archive")
    again = VocabIndex.cached(tokens, cache_dir=tmp_path)
    assert np.array_equal(again.flat, first.flat) and np.array_equal(again.offsets, first.offsets)


def test_a_cache_file_with_a_bad_layout_is_rebuilt(tmp_path, qwen):
    tokens = [qwen.token_bytes(i) for i in range(1000)]
    first = VocabIndex.cached(tokens, cache_dir=tmp_path)
    (cached,) = (tmp_path / "fence").glob("vocab-*.npz")
    offsets = first.offsets.copy()
    offsets[5], offsets[6] = offsets[6], offsets[5]  # a readable archive, a layout that lies
    np.savez(cached, order=first.order, flat=first.flat, offsets=offsets, vocab_size=np.int64(first.vocab_size))
    again = VocabIndex.cached(tokens, cache_dir=tmp_path)
    assert np.array_equal(again.offsets, first.offsets)


def test_the_dead_state_allows_no_token(qwen):
    vocab = FenceVocab.build([qwen.token_bytes(i) for i in range(qwen.vocab_size)], qwen.special_tokens, [151643])
    grammar = Grammar.compile(value_expr(SCHEMA), vocab)
    assert not grammar.bitmask(grammar.dfa.dead).any()  # a caller that ignored the mask gets nothing more
