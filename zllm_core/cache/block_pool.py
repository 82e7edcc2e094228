"""Ownership of the paged KV blocks: reference counts and the free list.

A block's owners (running sequences, the prefix index) each hold one reference; a block
returns to the free list when the last one lets go.  The pool knows nothing about tokens
or hashes, and holds no tensors (those are the model runner's `KVStorage`).
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np


class OutOfBlocks(RuntimeError):
    """The pool cannot satisfy an allocation; callers reclaim or preempt, then retry."""


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int = 16):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Counts change a whole block table at a time (18K blocks for a 300K-token context):
        # numpy updates them in one pass.
        self.ref_counts = np.zeros(num_blocks, dtype=np.int32)
        self._slot = np.zeros(num_blocks, dtype=np.intp)  # scratch for _distinct
        self._iota = np.arange(num_blocks, dtype=np.intp)
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def is_empty(self) -> bool:
        return len(self._free) == self.num_blocks and not self.ref_counts.any()

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfBlocks(f"need {n} blocks, {len(self._free)} free")
        ids = [self._free.popleft() for _ in range(n)]
        self.ref_counts[ids] = 1
        return ids

    def incref(self, block_ids: Sequence[int]) -> None:
        ids = self._distinct(block_ids)
        refs = self.ref_counts[ids]
        if (refs <= 0).any():
            raise ValueError(f"block {ids[refs <= 0][0]} is free; it cannot be shared")
        self.ref_counts[ids] = refs + 1

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop one reference from each block; a block with none left is free again."""
        ids = self._distinct(block_ids)
        refs = self.ref_counts[ids]
        if (refs <= 0).any():
            raise ValueError(f"block {ids[refs <= 0][0]} freed more often than it was referenced")
        self.ref_counts[ids] = refs - 1
        self._free.extend(ids[refs == 1].tolist())

    def _distinct(self, block_ids: Sequence[int]) -> np.ndarray:
        """The ids as an index array, refused if one repeats: a vectorised update would count
        a repeated block once (each block table holds a block once)."""
        ids = np.asarray(block_ids, dtype=np.intp)
        order = self._iota[:len(ids)]
        self._slot[ids] = order
        if not np.array_equal(self._slot[ids], order):
            raise ValueError("a block appears twice in one call")
        return ids
