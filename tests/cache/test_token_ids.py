"""Token id arrays: the one dtype the cache keys, and the vectorised common prefix."""
import numpy as np
import pytest

from zllm_core.cache.token_ids import TOKEN_DTYPE, common_prefix, token_array


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
