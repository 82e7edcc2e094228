"""The scheduler's one door to KV blocks: prefix matches, allocation, commits, releases.

Blocks come from the pool; the prefix cache (when on) supplies adopted prefixes, takes
completed blocks into its index and gives unused ones back under pressure.  Callers
speak in request ids, token ids and block tables; they never see the pool or the
cache, so ownership changes in one place.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.block_table import BlockTable
from zllm_core.cache.prefix_cache import CacheRequest, PrefixCache, PrefixMatch
from zllm_core.cache.token_ids import TokenIds


class KVCacheManager:
    def __init__(self, pool: BlockPool, cache: Optional[PrefixCache] = None):
        self.pool = pool
        self.cache = cache
        self.block_size = pool.block_size

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def capacity_tokens(self) -> int:
        return self.pool.capacity_tokens

    def request(self, scope: bytes, cache_id: Optional[str], prompt: TokenIds) -> Optional[CacheRequest]:
        """What a new request brings to the cache, its prompt verified against its id's latest
        state; None when the cache is off."""
        if self.cache is None:
            return None
        return CacheRequest(scope, cache_id, self.cache.verify(prompt, scope, cache_id))

    def match(self, request_id: str, tokens: TokenIds, request: Optional[CacheRequest],
              first: bool, room: int) -> PrefixMatch:
        """The longest cached prefix of ``tokens``, its blocks now referenced by the request.
        ``first``: the request's first admission (later ones, after a preemption, are not
        counted again); ``room``: how many blocks it may newly take now."""
        if self.cache is None or request is None:
            return PrefixMatch(np.zeros(0, dtype=np.intp), 0, "cold")
        return self.cache.match(request_id, tokens, request, count=first, room=room)

    def grow(self, table: BlockTable, num_tokens: int, reserve: int = 0) -> bool:
        """Extend ``table`` to hold ``num_tokens`` tokens, leaving ``reserve`` blocks free after;
        unused cache blocks are evicted before anything is refused."""
        need = -(-num_tokens // self.block_size) - len(table)
        if need <= 0:
            return True
        short = need + reserve - self.pool.num_free
        if short > 0 and self.cache is not None:
            self.cache.evict(short)
        if self.pool.num_free < need + reserve:
            return False
        table.extend(self.pool.allocate(need))
        return True

    def commit(self, request_id: str, tokens: TokenIds, table: Sequence[int], num_computed: int) -> None:
        """The request's first ``num_computed`` tokens now have K/V: full blocks join the index."""
        if self.cache is not None:
            self.cache.commit(request_id, tokens, table, num_computed)

    def release(self, request_id: str, table: Sequence[int], tokens: Optional[TokenIds] = None) -> None:
        """The request lets go of its blocks; with ``tokens`` (a normal finish) its terminal
        state stays with the cache for the conversation's next turn."""
        ids = np.asarray(table, dtype=np.intp)  # one conversion (19K ids: a few microseconds) for both
        self.pool.free(ids)
        if self.cache is not None:
            self.cache.release(request_id, ids, tokens)

    def forget(self, request: CacheRequest) -> None:
        """Drops the terminal states kept under the request's cache id."""
        if self.cache is not None:
            self.cache.forget(request)

    def metrics(self) -> dict[str, Any]:
        """Pool, cache and SSD counters. Safe from another thread without locks: it reads ints,
        and copies the lookups Counter in one C-level dict merge."""
        pool, free = self.pool, self.pool.num_free  # one read, so free + used == total
        out: dict[str, Any] = {
            "blocks": {"total": pool.num_blocks, "free": free, "used": pool.num_blocks - free},
            "cache": None, "ssd": None,
        }
        if self.cache is not None:
            stats = self.cache.stats
            out["cache"] = {
                "requests": stats.requests, "prompt_tokens": stats.prompt_tokens,
                "cached_tokens": stats.cached_tokens, "token_hit_rate": stats.token_hit_rate,
                "lookups": dict(stats.lookups), "near_misses": stats.near_misses,
                "hashed_blocks": stats.hashed_blocks,
                "evictions": self.cache.index.num_evicted, "indexed_blocks": len(self.cache.index),
            }
            out["ssd"] = self.cache.ssd.metrics() if self.cache.ssd else None
        return out

    def close(self) -> None:
        """Graceful shutdown: the prefix cache backs its resident state up to the SSD tier."""
        if self.cache is not None:
            self.cache.close()
