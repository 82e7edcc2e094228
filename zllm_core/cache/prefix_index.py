"""Map from chained block keys to physical blocks, with LRU eviction of unused blocks.

The index holds one pool reference on every block it maps; a block whose only reference
is the index's is unused and may be evicted, least recently used first.  The index knows
keys and block ids, never tokens' meaning.  An eviction hook (the SSD tier's backup) sees
every victim's key, scope and block while its K/V is still in the pool.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Optional, Sequence

import numpy as np

from zllm_core.cache.block_pool import BlockPool


# (scopes, keys, blocks) of blocks about to be evicted
EvictHook = Callable[[list[bytes], list[bytes], list[int]], None]


class PrefixIndex:
    def __init__(self, pool: BlockPool, on_evict: Optional[EvictHook] = None):
        self.pool = pool
        self.on_evict = on_evict
        self._block_of: dict[bytes, int] = {}
        self._key_of: dict[int, bytes] = {}
        self._scope_of: dict[int, bytes] = {}
        self._indexed = np.zeros(pool.num_blocks, dtype=bool)
        # Which registration indexed each block (0: not indexed): a holder of (block, epoch)
        # pairs (a terminal session) learns in one vectorised pass whether its blocks are still
        # those of its keys.
        self._epoch = np.zeros(pool.num_blocks, dtype=np.int64)
        self._registrations = 0
        # Eviction order: releases oldest first, each a user's indexed blocks tail first. A
        # block counts at its latest release only, so releasing a 300K-token context is a few
        # numpy passes, not 18K moves in a queue.
        self._releases: deque[tuple[int, np.ndarray]] = deque()
        self._released_at = np.zeros(pool.num_blocks, dtype=np.int64)
        self._clock = 0
        self._queued = 0  # entries in _releases, those that no longer count included
        self.num_evicted = 0

    def __len__(self) -> int:
        return len(self._block_of)

    def keys(self) -> list[bytes]:
        """Every indexed key; one C-level copy, so another thread may take it while the engine
        thread registers and evicts (a cluster replica's routing summary)."""
        return list(self._block_of)

    def lookup(self, keys: Sequence[bytes]) -> list[int]:
        """Blocks of the longest run of leading keys present in the index."""
        # All keys at C speed, then cut at the first miss: callers pass keys that are mostly hits.
        blocks = list(map(self._block_of.get, keys))
        return blocks[:blocks.index(None)] if None in blocks else blocks

    def adopt(self, blocks: Sequence[int]) -> None:
        """A new user takes the blocks by reference: no copy, one more reference each.
        Eviction skips them while they are in use; their next release queues them again."""
        self.pool.incref(blocks)

    def register(self, keys: Sequence[bytes], blocks: Sequence[int], scope: bytes = b"") -> list[int]:
        """Index newly completed full blocks (still in use by the sequence that filled them).
        Returns the block each key is indexed under (-1: none, its block being another key's)."""
        new, indexed = [], []
        for key, block in zip(keys, blocks.tolist() if isinstance(blocks, np.ndarray) else blocks):
            held = self._block_of.get(key)
            if held is not None or block in self._key_of:
                indexed.append(-1 if held is None else held)
                continue  # an identical block is already indexed; this copy stays private
            self._block_of[key] = block
            self._key_of[block] = key
            self._scope_of[block] = scope
            new.append(block)
            indexed.append(block)
        if new:  # most engine steps complete no block
            self._registrations += 1
            self._indexed[new] = True
            self._epoch[new] = self._registrations
            self.pool.incref(new)
        return indexed

    def epochs(self, blocks: np.ndarray) -> np.ndarray:
        """Each block's registration, for `resident` to check later; -1 where there is no block or
        it is no longer indexed (another key's block, evicted while this holder ran)."""
        epochs = self._epoch[blocks]
        return np.where((blocks >= 0) & (epochs > 0), epochs, -1)

    def resident(self, blocks: np.ndarray, epochs: np.ndarray) -> int:
        """How many leading `blocks` are still indexed by the registration `epochs` names (so
        still under the keys they were indexed with): one gather and compare, no key lookups.
        A missing block's -1 matches no epoch, an evicted block's 0 none that registered."""
        ok = self._epoch[blocks] == epochs
        first = int(ok.argmin()) if len(ok) else 0
        return len(ok) if not len(ok) or ok[first] else first

    def released(self, blocks: Sequence[int]) -> None:
        """A user let go of ``blocks``; those only the index still holds become evictable.

        They join as the most recent, walked from the tail so a finished request's last
        block is evicted before its prefix, which later requests are likelier to share.
        """
        ids = np.asarray(blocks, dtype=np.intp)[::-1]
        ids = ids[self._indexed[ids]]
        if ids.size:
            self._clock += 1
            self._released_at[ids] = self._clock
            self._enqueue(self._clock, ids)
        if self._queued > 2 * self.pool.num_blocks:
            self._compact()

    def evict(self, n: int) -> int:
        """Free up to ``n`` unused blocks; a block in use is never touched."""
        freed = 0
        while freed < n and self._releases:
            freed += self._evict_oldest_release(n - freed)
        self.num_evicted += freed
        return freed

    def _evict_oldest_release(self, n: int) -> int:
        """Evict up to ``n`` blocks of the oldest release in its order; the rest stays queued."""
        clock, ids = self._releases.popleft()
        self._queued -= ids.size
        ids = self._still_counting(clock, ids)
        victims = []
        for i in range(len(ids)):
            if len(victims) == n:
                self._enqueue(clock, ids[i:], oldest=True)
                break
            block = int(ids[i])
            if self.pool.ref_counts[block] == 1:  # else adopted again: its release requeues it
                victims.append(block)
        if victims and self.on_evict is not None:
            self.on_evict([self._scope_of[b] for b in victims], [self._key_of[b] for b in victims], victims)
        for block in victims:
            self._unindex(block)
        self.pool.free(victims)
        return len(victims)

    def _still_counting(self, clock: int, ids: np.ndarray) -> np.ndarray:
        """The blocks of a release neither released again since nor evicted."""
        return ids[(self._released_at[ids] == clock) & self._indexed[ids]]

    def _enqueue(self, clock: int, ids: np.ndarray, oldest: bool = False) -> None:
        if oldest:
            self._releases.appendleft((clock, ids))
        else:
            self._releases.append((clock, ids))
        self._queued += ids.size

    def _compact(self) -> None:
        """Drop entries that no longer count, so the queue stays within twice the pool when
        requests keep releasing the same prefix and nothing is evicted."""
        releases, self._releases, self._queued = self._releases, deque(), 0
        for clock, ids in releases:
            ids = self._still_counting(clock, ids)
            if ids.size:
                self._enqueue(clock, ids)

    def entries(self) -> list[tuple[bytes, bytes, int]]:
        """(scope, key, block) of every indexed block."""
        return [(self._scope_of[b], k, b) for b, k in self._key_of.items()]

    def clear(self) -> None:
        """Drop the index's reference on every block (blocks in use stay with their users)."""
        blocks = list(self._key_of)
        for block in blocks:
            self._unindex(block)
        self.pool.free(blocks)
        self._releases.clear()
        self._queued = 0

    def _unindex(self, block: int) -> None:
        """Forget the block's key; the caller drops the index's reference."""
        del self._block_of[self._key_of.pop(block)]
        del self._scope_of[block]
        self._indexed[block] = False
        self._epoch[block] = 0
