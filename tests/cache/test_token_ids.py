"""Token id arrays: the one dtype the cache keys, and the vectorised common prefix."""
import numpy as np
import pytest

from zllm_core.cache.token_ids import TOKEN_DTYPE, JoinedTokens, common_prefix, frozen_tokens, is_frozen, token_array


@pytest.mark.parametrize("fork", [0, 1, 4095, 4096, 4097, 20_000, 89_999])
def test_common_prefix_finds_the_first_difference_across_slice_boundaries(fork):
    a = np.arange(90_000, dtype=np.uint32)
    b = a.copy()
    b[fork] += 1
    assert common_prefix(a, b) == fork
    assert common_prefix(a.tolist(), b) == fork  # lists and arrays of either sign compare alike


def test_common_prefix_of_a_prefix_is_its_length():
    a = np.arange(10_000)
    assert common_prefix(a, a[:7_000]) == 7_000
    assert common_prefix([], a) == 0


def test_token_array_keeps_an_int32_array_and_reinterprets_uint32():
    ids = np.arange(5, dtype=TOKEN_DTYPE)
    assert token_array(ids) is ids
    assert token_array(ids.astype(np.uint32)).tobytes() == ids.tobytes()
    assert token_array([1, 2, 3]).dtype == TOKEN_DTYPE


def test_joined_tokens_slice_and_compare_as_their_concatenation():
    rng = np.random.default_rng(0)
    head, tail = rng.integers(0, 3, 40).astype(TOKEN_DTYPE), rng.integers(0, 3, 9).astype(TOKEN_DTYPE)
    joined, whole = JoinedTokens(head, tail), np.concatenate((head, tail))
    assert len(joined) == len(whole) and np.array_equal(np.asarray(joined), whole)
    for start, stop in [(0, 40), (3, 17), (40, 49), (41, 45), (38, 43), (0, 49), (45, 100)]:
        assert joined[start:stop].tolist() == whole[start:stop].tolist()
    assert np.shares_memory(joined[3:17], head) and np.shares_memory(joined[41:45], tail)
    for fork in [0, 5, 39, 40, 41, 48]:
        other = whole.copy()
        other[fork] += 1
        for a, b in [(joined, other), (other, joined), (joined, JoinedTokens(other[:30], other[30:]))]:
            assert common_prefix(a, b) == fork
            assert all(common_prefix(a, b, start) == fork for start in (0, fork // 2, fork))  # known equal
    assert common_prefix(joined, whole[:44]) == 44 and common_prefix(whole, joined) == 49


def test_frozen_tokens_hold_a_read_only_array_as_it_is_and_copy_anything_writable():
    ids = np.arange(6, dtype=np.uint32)
    ids.flags.writeable = False
    assert is_frozen(ids) and np.shares_memory(frozen_tokens(ids), ids)
    assert frozen_tokens(ids).dtype == TOKEN_DTYPE
    writable = np.arange(6, dtype=TOKEN_DTYPE)
    view = writable[:4]
    view.flags.writeable = False  # read-only, but its base can still change under it
    for arg in (writable, view, [1, 2, 3]):
        held = frozen_tokens(arg)
        assert not is_frozen(arg) and is_frozen(held) and not np.shares_memory(held, writable)
    joined = frozen_tokens(JoinedTokens(ids, writable))
    assert np.shares_memory(joined.head, ids) and not np.shares_memory(joined.tail, writable)


def test_views_of_one_buffer_share_what_both_reach_and_other_layouts_are_compared():
    buffer = np.arange(64, dtype=np.uint32)
    assert common_prefix(buffer[:40], buffer) == 40
    assert common_prefix(buffer[:40].view(np.int32), buffer[:50]) == 40
    assert common_prefix(buffer[::2], buffer) == 1  # the same address, another stride: 0, 2 vs 0, 1
