"""Prompt-lookup drafting: propose the continuation of the latest earlier occurrence of the
sequence's last N tokens.

Coding agents copy what they read (code, tool output, their own earlier edits), so the
tokens that followed the same N-gram last time are a good guess for the next ones.  The
index maps each N-gram to the end of its latest occurrence; it is built from the context
with numpy once, on the first draft, and then grows by one entry per token, so a draft costs
O(1) however long the context is.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

N = 3  # tokens a match must share; shorter matches propose noise more often than copies
_SHIFT = 21  # bits per token id in a key: ids below 2M, three to an int64


def _keys(tokens: np.ndarray) -> np.ndarray:
    """The N-gram ending at each position >= N-1, packed exactly into one int64."""
    t = tokens.astype(np.int64)
    keys = t[:len(t) - N + 1].copy()
    for j in range(1, N):
        keys = (keys << _SHIFT) | t[j:len(t) - N + 1 + j]
    return keys


def _key(gram: list[int]) -> int:
    key = 0
    for t in gram:
        key = (key << _SHIFT) | t
    return key


class Drafter(Protocol):
    """What proposes draft tokens; a draft model would be another."""

    def propose(self, tokens: np.ndarray) -> np.ndarray: ...


class NgramDrafter:
    def __init__(self, num_tokens: int):
        self.num_tokens = num_tokens  # K: the longest draft
        self._ends: dict[int, int] | None = None  # N-gram -> end of its latest occurrence
        self._indexed = 0  # tokens whose N-grams (ending there) are in the index

    def propose(self, tokens: np.ndarray) -> np.ndarray:
        """Up to K tokens likely to follow ``tokens`` (which only ever grows between calls)."""
        n = len(tokens)
        if n <= N:
            return tokens[:0]
        if self._ends is None:
            # All but the final N-gram: looking it up must find an earlier occurrence.
            keys = _keys(tokens[:n - 1])
            self._ends = dict(zip(keys.tolist(), range(N, n)))
            self._indexed = n - 1
        ends = self._ends
        for end in range(self._indexed + 1, n):  # what was appended since
            ends[_key(tokens[end - N:end].tolist())] = end
        self._indexed = n - 1
        start = ends.get(_key(tokens[n - N:].tolist()))
        if start is None:
            return tokens[:0]
        return tokens[start:min(start + self.num_tokens, n)]
