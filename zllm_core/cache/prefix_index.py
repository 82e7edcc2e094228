"""Map from chained block keys to physical blocks, with LRU eviction of unused blocks.

The index holds one pool reference on every block it maps; a block whose only reference
is the index's is unused and may be evicted, least recently used first.  The index knows
keys and block ids, never tokens' meaning.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from zllm_core.cache.block_pool import BlockPool


class PrefixIndex:
    def __init__(self, pool: BlockPool):
        self.pool = pool
        self._block_of: dict[bytes, int] = {}
        self._key_of: dict[int, bytes] = {}
        self._unused: OrderedDict[int, None] = OrderedDict()  # front = evicted first
        self.num_evicted = 0

    def __len__(self) -> int:
        return len(self._block_of)

    def lookup(self, keys: Sequence[bytes]) -> list[int]:
        """Blocks of the longest run of leading keys present in the index."""
        # All keys at C speed, then cut at the first miss: callers pass keys that are mostly hits.
        blocks = list(map(self._block_of.get, keys))
        return blocks[:blocks.index(None)] if None in blocks else blocks

    def adopt(self, blocks: Sequence[int]) -> None:
        """A new user takes the blocks by reference: no copy, one more reference each.

        Their entries stay in the unused queue (taking a 300K-token prefix out of it cost
        milliseconds per request): eviction skips a block in use, and its release queues it
        again as the most recent."""
        self.pool.incref(list(blocks))

    def register(self, keys: Sequence[bytes], blocks: Sequence[int]) -> None:
        """Index newly completed full blocks (still in use by the sequence that filled them)."""
        for key, block in zip(keys, blocks):
            if key in self._block_of or block in self._key_of:
                continue  # an identical block is already indexed; this copy stays private
            self.pool.incref([block])
            self._block_of[key] = block
            self._key_of[block] = key

    def released(self, blocks: Sequence[int]) -> None:
        """A user let go of ``blocks``; those only the index still holds become evictable.

        They join as the most recent, walked from the tail so a finished request's last
        block is evicted before its prefix, which later requests are likelier to share.
        """
        for b in reversed(blocks):
            if b in self._key_of and self.pool.ref_counts[b] == 1:
                self._unused[b] = None
                self._unused.move_to_end(b)

    def evict(self, n: int) -> int:
        """Free up to ``n`` unused blocks; a block in use is never touched."""
        freed = 0
        while freed < n and self._unused:
            block, _ = self._unused.popitem(last=False)
            if self.pool.ref_counts[block] == 1:  # else adopted since it was queued
                self._drop(block)
                freed += 1
        self.num_evicted += freed
        return freed

    def num_evictable(self) -> int:
        return sum(self.pool.ref_counts[b] == 1 for b in self._unused)

    def clear(self) -> None:
        """Drop the index's reference on every block (blocks in use stay with their users)."""
        for block in list(self._key_of):
            self._drop(block)
        self._unused.clear()

    def _drop(self, block: int) -> None:
        del self._block_of[self._key_of.pop(block)]
        self.pool.free([block])
