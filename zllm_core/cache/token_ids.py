"""Token ids as the cache and engine hold them: flat int32 arrays, never copied per request.

A 300K-token context is a 1.2 MB buffer: copying or comparing it costs a memcpy (0.2-0.3 ms
when it is not in the CPU's caches), where a list of Python ints costs tens of milliseconds
to build, copy or hash.  A request's prompt is held as the tokenizer gave it (read-only), and
what the request generates after it is kept apart (`JoinedTokens`): a turn copies only what
is new.
"""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np

TOKEN_DTYPE = np.int32  # block keys hash these 4-byte little-endian values


class JoinedTokens:
    """A prompt followed by the tokens generated after it, addressed as one sequence without
    copying the prompt: a slice within either part is a view, one across the join a
    concatenation of what it covers (the few tokens around the join, in practice)."""

    __slots__ = ("head", "tail")

    def __init__(self, head: np.ndarray, tail: np.ndarray):
        self.head, self.tail = head, tail

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise IndexError("joined tokens are sliced with step 1 only")
        h = len(self.head)
        if stop <= h:
            return self.head[start:stop]
        if start >= h:
            return self.tail[start - h:stop - h]
        return np.concatenate((self.head[start:], self.tail[:stop - h]))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """All of it in one new array: a copy of the prompt, for the rare paths that need one
        buffer (a preempted request matched again, a session written to the SSD tier)."""
        out = np.concatenate((self.head, self.tail))
        return out if dtype is None else out.astype(dtype, copy=False)


TokenIds = Union[np.ndarray, JoinedTokens, Sequence[int]]


def token_array(ids: TokenIds) -> np.ndarray:
    """``ids`` as a contiguous int32 array; no copy when it already is one, nor for the
    tokenizer's uint32 ids, which are viewed as int32 (below 2**31 their bytes, hence their
    block keys, are the same; ids past the vocabulary are refused before they get here)."""
    if isinstance(ids, np.ndarray) and ids.dtype == np.uint32 and ids.flags.c_contiguous:
        return ids.view(TOKEN_DTYPE)
    return np.ascontiguousarray(ids, dtype=TOKEN_DTYPE)


def is_frozen(ids: object) -> bool:
    """Whether ``ids`` is an array nothing can write: it and every array it views are
    read-only (the tokenizer's prompt arrays are), so it may be held without a copy."""
    while isinstance(ids, np.ndarray):
        if ids.flags.writeable:
            return False
        ids = ids.base
    return ids is None or isinstance(ids, bytes)


def frozen_tokens(ids: TokenIds) -> Union[np.ndarray, JoinedTokens]:
    """``ids`` as int32 tokens that will never change: as they are when already frozen
    (viewed as int32), else a read-only copy. A joined sequence copies its tail only."""
    if isinstance(ids, JoinedTokens):
        return JoinedTokens(frozen_tokens(ids.head), frozen_tokens(ids.tail))
    if is_frozen(ids) and ids.ndim == 1 and ids.dtype in (np.int32, np.uint32) and ids.flags.c_contiguous:
        return token_array(ids)
    out = np.array(ids, dtype=TOKEN_DTYPE)  # the caller may write its own array later
    out.flags.writeable = False
    return out


def common_prefix(a: TokenIds, b: TokenIds, start: int = 0) -> int:
    """Length of the longest common prefix, the first ``start`` tokens being known equal.
    Joined sequences are compared part by part (no concatenation); arrays in growing slices,
    so that sequences which part early cost little and those which share everything cost one
    vectorised pass."""
    joins = [len(x.head) for x in (a, b) if isinstance(x, JoinedTokens)]
    n = min(len(a), len(b))
    if joins:
        cut = max(min(min(joins), n), start)
        shared = start + common_prefix(a[start:cut], b[start:cut])
        return shared if shared < cut or cut == n else cut + common_prefix(a[cut:n], b[cut:n])
    return start + _common_prefix(token_array(a[start:n]), token_array(b[start:n]))


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a and b read the same bytes: then they are equal wherever both reach."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.strides == b.strides and a.dtype.itemsize == b.dtype.itemsize)


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    # Slices of at most 32K: their masks come from the heap and stay in cache, where one mask of
    # the whole array would be fresh pages every call.
    n = min(len(a), len(b))
    if _same_memory(a, b):  # a conversation's prompts are views of one buffer (tokenizer/id_run.py)
        return n
    i, step = 0, 4096
    while i < n:
        j = min(n, i + step)
        differs = a[i:j] != b[i:j]
        first = int(differs.argmax())
        if differs[first]:
            return i + first
        i, step = j, min(step * 4, 1 << 15)
    return n
