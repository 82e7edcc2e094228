"""Where a request goes: the replica holding its conversation, else the one holding the longest
prefix of its first blocks, load breaking ties; past an overload threshold, balance wins.

The policy sees token-derived state only: the chained keys of the request's first blocks,
computed with the engines' own scope, block size and hash (`RouteKeys`), and each replica's
published `BlockSummary`. A conversation id (prompt_cache_key, a Responses chain, Claude
Code's session, or the ingress's tokenizer session for a keyless conversation) is a hint
that pins the conversation to the replica that served it; the engine there still verifies
every token. Ray-free, so the benchmark drives the same policy over in-process engines.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Hashable, Mapping, Optional

import numpy as np

from zllm_core.cache.block_hash import chain_keys
from zllm_core.cache.scope import CacheHint, Scope
from zllm_core.cache.token_ids import TokenIds, token_array
from zllm_core.cluster.summary import BlockSummary, key_words

ROUTE_WINDOW_BLOCKS = 2048  # 32K tokens of 16: about 3 ms of sha256 per request


@dataclass(frozen=True)
class Route:
    """What the router knows of a request."""

    tenant: str
    cache_id: Optional[str]
    words: np.ndarray  # key_words of the chained keys of its first blocks


@dataclass(frozen=True)
class RouteKeys:
    """The engines' keying (their base scope, block size and hash), so the router's keys are
    the engines' keys."""

    scope: Scope
    block_size: int
    hash_algo: str
    window_blocks: int = ROUTE_WINDOW_BLOCKS

    def route(self, prompt_ids: TokenIds, hint: CacheHint) -> Route:
        ids = token_array(prompt_ids)
        # The engine never matches the final token: it must run to give the next logits.
        n = min((len(ids) - 1) // self.block_size, self.window_blocks)
        keys = chain_keys(ids[:n * self.block_size], self.block_size, hint.scope(self.scope).digest(),
                          b"", self.hash_algo) if n > 0 else []
        return Route(hint.tenant, hint.cache_id, key_words(keys))


@dataclass(frozen=True)
class ReplicaView:
    """One replica as the router sees it now."""

    load: int  # requests sent to it and not yet finished
    summary: Optional[BlockSummary] = None  # None until it first publishes


@dataclass(frozen=True)
class Balance:
    """A replica is overloaded when it carries `absolute` more requests than the least loaded
    and `relative` times as many: then locality yields (as SGLang's router decides)."""

    absolute: int = 8
    relative: float = 1.5

    def overloaded(self, load: int, least: int) -> bool:
        return load - least >= self.absolute and load >= self.relative * least


class AffinityPolicy:
    def __init__(self, balance: Balance = Balance(), max_conversations: int = 1 << 16):
        self.balance = balance
        self.max_conversations = max_conversations
        self._pins: OrderedDict[tuple[str, str], Hashable] = OrderedDict()
        self._turn = itertools.count()  # rotates exact ties, so idle replicas share new work
        self.decisions = {"pinned": 0, "prefix": 0, "balanced": 0, "cold": 0}

    def choose(self, route: Route, replicas: Mapping[Hashable, ReplicaView]) -> list[Hashable]:
        """Every replica, most preferred first (the caller falls through when one is full)."""
        ids = list(replicas)
        least = min(v.load for v in replicas.values())
        fits = [r for r in ids if not self.balance.overloaded(replicas[r].load, least)]
        pinned = self._pins.get((route.tenant, route.cache_id)) if route.cache_id else None
        turn = next(self._turn)
        depth = {r: replicas[r].summary.match(route.words) if replicas[r].summary else 0 for r in ids}

        def preference(i_r: tuple[int, Hashable]) -> tuple:
            i, r = i_r
            v = replicas[r]
            return (r not in fits, r != pinned, -depth[r], v.load,
                    v.summary.blocks if v.summary else 0, (i - turn) % len(ids))

        order = [r for _, r in sorted(enumerate(ids), key=preference)]
        self.decisions[self._kind(order[0], pinned, depth)] += 1
        return order

    @staticmethod
    def _kind(first: Hashable, pinned: Optional[Hashable], depth: dict[Hashable, int]) -> str:
        if first == pinned:
            return "pinned"
        if depth[first] < max(depth.values()):
            return "balanced"  # a replica holding more was passed over for its load
        return "prefix" if depth[first] else "cold"

    def routed(self, route: Route, replica: Hashable) -> None:
        """The request went to `replica`: its conversation's next turn follows it there."""
        if route.cache_id is None:
            return
        key = (route.tenant, route.cache_id)
        self._pins[key] = replica
        self._pins.move_to_end(key)
        while len(self._pins) > self.max_conversations:
            self._pins.popitem(last=False)
