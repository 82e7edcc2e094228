"""What a replica publishes about its resident prefix blocks, and how the router reads it.

A chained block key names its whole prefix (scope, every earlier block, its own tokens), so a
replica that holds a request's key i holds that request's first i + 1 blocks: the router needs
membership, not positions. A replica publishes a sample of its resident keys chosen by the
keys' own bits (the first 8 bytes, read as an integer, with their low `level` bits zero), so the
router samples a request's keys the same way with no coordination; the level rises until the
sample fits the bound, and the match's resolution is about 2**level blocks. Keys travel as
their first 8 bytes, sorted, in one bytes object (Ray Serve's controller compares what
replicas publish, so a summary is plain data): 4,096 of them are 32 KB.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

MAX_KEYS = 4096


def key_words(keys: Sequence[bytes]) -> np.ndarray:
    """The first 8 bytes of each key as one uint64 (little-endian)."""
    if not keys:
        return np.zeros(0, np.uint64)
    return np.frombuffer(b"".join(k[:8] for k in keys), dtype="<u8").astype(np.uint64)


def _sampled(words: np.ndarray, level: int) -> np.ndarray:
    return (words & np.uint64((1 << level) - 1)) == 0


@dataclass(frozen=True)
class BlockSummary:
    level: int
    keys: bytes  # the sampled resident keys' first 8 bytes, as sorted little-endian uint64
    blocks: int  # resident blocks in all, the sample's population

    @classmethod
    def of(cls, keys: Sequence[bytes], max_keys: int = MAX_KEYS) -> "BlockSummary":
        words = key_words(keys)
        level = 0
        while int(_sampled(words, level).sum()) > max_keys:
            level += 1
        return cls(level, np.sort(words[_sampled(words, level)]).astype("<u8").tobytes(), len(words))

    @property
    def num_keys(self) -> int:
        return len(self.keys) // 8

    def match(self, request: np.ndarray) -> int:
        """How many of the request's leading blocks this replica holds, to the sample's
        resolution: one past the deepest sampled request key it holds (`request`: the
        key_words of the request's leading blocks, in order)."""
        at = np.flatnonzero(_sampled(request, self.level))
        if not len(at) or not self.keys:
            return 0
        keys = np.frombuffer(self.keys, dtype="<u8")
        words = request[at]
        pos = np.minimum(np.searchsorted(keys, words), len(keys) - 1)
        held = at[keys[pos] == words]
        return int(held[-1]) + 1 if len(held) else 0
