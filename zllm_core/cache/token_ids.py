"""Token ids as the cache and engine hold them: one flat int32 array per sequence.

A 300K-token context is a 1.2 MB buffer: copying or comparing it costs a memcpy, where a
list of Python ints costs tens of milliseconds to build, copy or hash.
"""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np

TOKEN_DTYPE = np.int32  # block keys hash these 4-byte little-endian values
TokenIds = Union[np.ndarray, Sequence[int]]


def token_array(ids: TokenIds) -> np.ndarray:
    """``ids`` as a contiguous int32 array; no copy when it already is one, nor for the
    tokenizer's uint32 ids, which are viewed as int32 (below 2**31 their bytes, hence their
    block keys, are the same; ids past the vocabulary are refused before they get here)."""
    if isinstance(ids, np.ndarray) and ids.dtype == np.uint32 and ids.flags.c_contiguous:
        return ids.view(TOKEN_DTYPE)
    return np.ascontiguousarray(ids, dtype=TOKEN_DTYPE)


def common_prefix(a: TokenIds, b: TokenIds) -> int:
    """Length of the longest common prefix, compared in growing slices so that sequences
    which part early cost little and those which share everything cost one vectorised pass."""
    a, b = token_array(a), token_array(b)
    n = min(len(a), len(b))
    i, step = 0, 4096
    while i < n:
        j = min(n, i + step)
        differs = a[i:j] != b[i:j]
        first = int(differs.argmax())
        if differs[first]:
            return i + first
        i, step = j, step * 4
    return n
