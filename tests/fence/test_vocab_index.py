"""The native vocabulary walk equals stepping the DFA token by token, and the on-disk layout
cache is validated before use."""
import numpy as np

from zllm_core.fence.automaton import compile_dfa
from zllm_core.fence.json_schema import value_expr
from zllm_core.fence.vocab_index import FAR, VocabIndex

SCHEMA = {"type": "object", "properties": {"p": {"type": "string", "maxLength": 3}, "n": {"type": "integer"}},
          "required": ["p"]}


def test_the_walk_equals_stepping_each_token(qwen):
    tokens = [qwen.token_bytes(i) for i in range(qwen.vocab_size)]
    index = VocabIndex.build(tokens, excluded=[151643])
    dfa = compile_dfa(value_expr(SCHEMA))
    for text in (b"", b'{"p": "', b'{"p": "ab', b'{"p": "abc"', b'{"p": "a", "n": 1'):
        state = dfa.step(dfa.start, text)
        got = index.remaining(dfa, state)
        for k in range(0, len(index.order), 997):  # a sample across lengths and scripts
            end = dfa.step(state, tokens[index.order[k]])
            want = FAR if end == dfa.dead else min(int(dfa.distance[end]), FAR - 1)
            assert got[k] == want, (text, tokens[index.order[k]])
    assert 151643 not in index.order


def test_a_damaged_cache_file_is_rebuilt(tmp_path, qwen):
    tokens = [qwen.token_bytes(i) for i in range(1000)]
    first = VocabIndex.cached(tokens, cache_dir=tmp_path)
    (cached,) = (tmp_path / "fence").glob("vocab-*.npz")
    cached.write_bytes(b"not a numpy archive")
    again = VocabIndex.cached(tokens, cache_dir=tmp_path)
    assert np.array_equal(again.flat, first.flat) and np.array_equal(again.offsets, first.offsets)
