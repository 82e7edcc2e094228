"""A request's KV blocks, in order: one growable int32 array.

A 300K-token context holds ~19K blocks.  As an array the table reaches the pool's reference
counts, the prefix index and the step's block-table mirror as slices; as a list it cost a
conversion of 19K Python ints each way (~0.2 ms each) on every admission and release.
"""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np

BLOCK_DTYPE = np.int32  # what the attention kernels read


class BlockTable:
    __slots__ = ("_ids", "_len")

    def __init__(self, ids: Union[np.ndarray, Sequence[int]] = (), room: int = 0):
        """A table holding ``ids``, with space for ``room`` more before it reallocates."""
        self._ids = np.empty(len(ids) + room, dtype=BLOCK_DTYPE)
        self._ids[:len(ids)] = ids
        self._len = len(ids)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, key):
        return self._ids[:self._len][key]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.ids if dtype is None else self.ids.astype(dtype, copy=False)

    @property
    def ids(self) -> np.ndarray:
        """The blocks as an array view (valid until the table grows)."""
        return self._ids[:self._len]

    def extend(self, ids: Sequence[int]) -> None:
        end = self._len + len(ids)
        if end > len(self._ids):
            grown = np.empty(2 * end, dtype=BLOCK_DTYPE)
            grown[:self._len] = self.ids
            self._ids = grown
        self._ids[self._len:end] = ids
        self._len = end

    def tolist(self) -> list[int]:
        return self.ids.tolist()
