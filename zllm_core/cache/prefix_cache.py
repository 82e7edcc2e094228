"""The device tier of the prefix cache: lookup order, adoption, registration, accounting.

Lookup order for a new request: its exact cache id (``prompt_cache_key``,
``previous_response_id``, a session header) verified token by token against the stored
terminal state -- an id is a hint, never proof; a request that forks inside that state's
blocks looks further, since another state may share more -- then the longest chained-key prefix in
the index, then the SSD tier (its exact cache id, then its longest run of keys) restored
after the device blocks, then cold.  A match never covers the final prompt token: the model
must run at least one position to produce the next token's logits.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np

from zllm_core.cache.block_hash import KeyChain, chain_keys
from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.block_table import BlockTable
from zllm_core.cache.prefix_index import PrefixIndex
from zllm_core.cache.snapshot_store import SessionRecord
from zllm_core.cache.ssd_tier import SSDTier
from zllm_core.cache.terminal_sessions import TerminalSession, TerminalSessions
from zllm_core.cache.token_ids import TokenIds, common_prefix, token_array

log = logging.getLogger("zllm.cache")

NEAR_MISS_MIN_TOKENS = 1024
NEAR_MISS_MIN_FRACTION = 0.9


class Verified(NamedTuple):
    """How many leading tokens of a prompt equal a terminal session's, compared at admission."""

    session: TerminalSession
    num_tokens: int  # the prompt's length
    shared: int


@dataclass(frozen=True)
class CacheRequest:
    """What a request brings to the cache besides its tokens."""

    scope: bytes  # Scope.digest()
    cache_id: Optional[str] = None
    # The prompt against the id's latest state (`PrefixCache.verify`): the match uses it rather
    # than comparing 1.2 MB again, and the engine validates only the ids after `shared`.
    verified: Optional[Verified] = field(default=None, compare=False)


@dataclass(frozen=True)
class PrefixMatch:
    blocks: np.ndarray  # block ids (intp), in order
    num_tokens: int
    kind: str  # "exact_id" | "longest_prefix" | "ssd_exact_id" | "ssd_longest_prefix" | "cold"


@dataclass(frozen=True)
class NearMiss:
    position: int
    shared_tokens: int
    session_tokens: int
    ours: str
    theirs: str


@dataclass
class CacheStats:
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    lookups: Counter = field(default_factory=Counter)
    near_misses: int = 0
    hashed_blocks: int = 0  # block keys computed; blocks shared with a resident session reuse its keys

    @property
    def token_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass
class _Live:
    request: CacheRequest
    keys: KeyChain  # chain keys of the full blocks computed so far
    registered: int
    blocks: BlockTable  # the block indexed under each of the first `registered` keys (-1: none)
    # The registrations (PrefixIndex.epochs) of the adopted ones, taken at the match (a holder
    # keeps them): a finish gathers only those of the blocks this request committed.
    epochs: np.ndarray
    parent: Optional[TerminalSession]


class PrefixCache:
    def __init__(self, pool: BlockPool, hash_algo: str = "sha256", max_rounds: int = 4,
                 describe: Callable[[Sequence[int]], str] = repr, ssd: Optional[SSDTier] = None):
        self.pool = pool
        self.block_size = pool.block_size
        self.hash_algo = hash_algo
        self.ssd = ssd
        self.index = PrefixIndex(pool, on_evict=ssd.backup if ssd is not None else None)
        self.sessions = TerminalSessions(max_rounds)
        self.stats = CacheStats()
        self.near_misses: list[NearMiss] = []
        self._describe = describe  # tokens -> text, for diagnostics only
        self._live: dict[str, _Live] = {}

    def keys(self, tokens: np.ndarray, scope: bytes, parent: bytes = b"") -> list[bytes]:
        keys = chain_keys(tokens, self.block_size, scope, parent, self.hash_algo)
        self.stats.hashed_blocks += len(keys)
        return keys

    # -- lookup -------------------------------------------------------------------------

    def verify(self, tokens: TokenIds, scope: bytes, cache_id: Optional[str]) -> Optional[Verified]:
        """Compare a prompt with its cache id's latest terminal state, once (see CacheRequest)."""
        session = self.sessions.latest(scope, cache_id) if cache_id is not None else None
        if session is None:
            return None
        return Verified(session, len(tokens), common_prefix(session.tokens, tokens))

    def match(self, request_id: str, tokens: TokenIds, request: CacheRequest,
              count: bool = True, room: Optional[int] = None) -> PrefixMatch:
        """Find and adopt the longest reusable prefix of ``tokens``.

        ``count`` is false when a preempted or deferred request matches again, so the
        hit-rate counters see each request once. ``room`` is how many blocks the request may
        newly take now; the SSD tier restores only for a prompt that fits in it."""
        tokens = token_array(tokens)
        usable = (len(tokens) - 1) // self.block_size  # full blocks before the final token
        # Diagnostics run once per request, not again when a deferred request re-matches.
        found = (self._match_by_id(tokens, request, usable, count)
                 or self._match_longest(tokens, request, usable, count))
        keys, blocks, epochs, kind, parent = found
        self.index.adopt(blocks)
        fits = room is None or -(-len(tokens) // self.block_size) - len(blocks) <= room
        if self.ssd is not None and len(blocks) < usable and fits:
            keys, blocks, kind = self._restore(tokens, request, usable, keys, blocks, kind)
        if len(epochs) < len(blocks):  # those not from a session: looked up, restored
            epochs = np.concatenate((epochs, self.index.epochs(blocks[len(epochs):])))
        self._live[request_id] = _Live(request, keys.prefix(len(blocks)), len(blocks), BlockTable(blocks, 64),
                                       epochs, parent)
        n = len(blocks) * self.block_size
        if count:
            self.stats.requests += 1
            self.stats.prompt_tokens += len(tokens)
            self.stats.cached_tokens += n
            self.stats.lookups[kind] += 1
        return PrefixMatch(blocks, n, kind)

    def _match_by_id(self, tokens: np.ndarray, request: CacheRequest, usable: int, diagnose: bool):
        if request.cache_id is None:
            return None
        session = self.sessions.latest(request.scope, request.cache_id)
        if session is None:
            return None
        v = request.verified
        fresh = v is not None and v.session is session and v.num_tokens == len(tokens)  # not preempted since
        shared = v.shared if fresh else common_prefix(session.tokens, tokens)
        full = min(shared // self.block_size, usable)
        if full < min(len(session.keys), usable):
            # The request forks inside the id's latest state: a conversation without a key of
            # its own (its id names a tokenizer session two may share) or an edited history.
            # Another state may share more, so the longest-prefix path looks (and diagnoses).
            return None
        keys = KeyChain(session.keys, full)
        blocks, epochs = self._resident(session, keys)
        if not len(blocks):
            return None  # the longest-prefix path looks again (and diagnoses)
        if diagnose:
            self._check_near_miss(tokens, session, shared)
        return keys, blocks, epochs, "exact_id", session

    def _match_longest(self, tokens: np.ndarray, request: CacheRequest, usable: int, diagnose: bool):
        # The resident session sharing the most is this request's parent, and the one a
        # fork would be diagnosed against.
        shared, parent, keys, source = self._closest_session(tokens, request.scope, usable)
        none = np.zeros(0, np.intp)
        blocks, epochs = self._resident(source, keys) if source is not None else (none, none)
        blocks = self._lookup_beyond(tokens, request.scope, usable, keys, blocks)
        if parent is not None and diagnose:
            self._check_near_miss(tokens, parent, shared)
        return keys, blocks, epochs, ("longest_prefix" if len(blocks) else "cold"), parent if len(blocks) else None

    def _closest_session(self, tokens: np.ndarray, scope: bytes, usable: int):
        """The recent session of ``scope`` sharing the most tokens (the newest among equals),
        how many it shares, and the chain keys of the request's leading blocks that sessions
        already hold, with the session they came from: equal scope and equal tokens make equal
        keys, so those need no hashing."""
        known = KeyChain()
        shared, parent, source = 0, None, None
        for session in self.sessions.recent(scope):
            n = self._shared_with(session, tokens, known)
            blocks = min(n // self.block_size, usable, len(session.keys))
            if blocks > len(known):
                known, source = KeyChain(session.keys, blocks), session
            if parent is None or n > shared:
                shared, parent = n, session
        return shared, parent, known, source

    def _resident(self, session: TerminalSession, keys: KeyChain) -> tuple[np.ndarray, np.ndarray]:
        """The blocks of ``keys`` (a prefix of the session's): the session's own where they are
        still indexed as it left them (one vectorised check), then the index's for the rest; and
        the epochs of the session's (still those blocks' registrations: a holder keeps them)."""
        n = self.index.resident(session.blocks[:len(keys)], session.epochs[:len(keys)])
        if n == len(keys):
            return session.blocks[:n], session.epochs[:n]
        more = np.asarray(self.index.lookup(keys[n:]), dtype=np.intp)
        return np.concatenate((session.blocks[:n], more)), session.epochs[:n]

    def _shared_with(self, session: TerminalSession, tokens: np.ndarray, keys: Sequence[bytes]) -> int:
        """Tokens shared with a session, given the keys of the request's leading blocks known so
        far: equal chain keys imply equal prefixes, so bisect them, then compare tokens."""
        lo, hi = 0, min(len(keys), len(session.keys))
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if session.keys[mid - 1] == keys[mid - 1]:
                lo = mid
            else:
                hi = mid - 1
        start = lo * self.block_size
        # A differing key pins the fork inside its block; if every key agreed, it may lie further.
        end = start + self.block_size if lo < min(len(keys), len(session.keys)) else None
        if end is None:
            return common_prefix(session.tokens, tokens, start)  # no slice: it would join a session's parts
        return start + common_prefix(session.tokens[start:end], tokens[start:end])

    def _lookup_beyond(self, tokens: np.ndarray, scope: bytes, usable: int, keys: KeyChain,
                       blocks: np.ndarray) -> np.ndarray:
        """``blocks`` (of ``keys``, all indexed) extended past what the sessions knew: another
        branch (still running, or whose session was dropped) may have registered more. Runs of
        doubling length are hashed while every key so far is found; ``keys`` grows in place."""
        step = 16
        while len(blocks) == len(keys) < usable:
            end = min(usable, len(keys) + step)
            more = self.keys(tokens[len(keys) * self.block_size:end * self.block_size], scope,
                             keys[-1] if keys else b"")
            keys += more
            blocks = np.concatenate((blocks, np.asarray(self.index.lookup(more), dtype=np.intp)))
            step *= 2
        return blocks

    def _restore(self, tokens: np.ndarray, request: CacheRequest, usable: int, keys: KeyChain,
                 blocks: np.ndarray, kind: str) -> tuple[KeyChain, np.ndarray, str]:
        """Extend the device blocks with the SSD tier's run after them, restored into the pool."""
        keys, ssd_kind = self._ssd_keys(tokens, request, usable, keys, len(blocks))
        located = self.ssd.locate(keys[len(blocks):usable])
        restored = self.ssd.restore(located, request.scope, self._take, self.pool.free) if located else None
        if not restored:
            return keys, blocks, kind
        self.index.register(keys[len(blocks):len(blocks) + len(restored)], restored, request.scope)
        return keys, np.concatenate((blocks, np.asarray(restored, dtype=np.intp))), ssd_kind

    def _ssd_keys(self, tokens: np.ndarray, request: CacheRequest, usable: int, keys: KeyChain,
                  resident: int) -> tuple[KeyChain, str]:
        """The request's keys up to ``usable`` blocks, and how the SSD lookup is made: first by an
        SSD session record with the request's cache id, which supplies the keys of the tokens it
        shares (verified token by token) past the ``resident`` blocks; the rest are hashed."""
        kind = "ssd_longest_prefix"
        record = self.ssd.session(request.scope, request.cache_id) if request.cache_id is not None else None
        if record is not None:
            shared = min(common_prefix(record.tokens, tokens) // self.block_size, usable, len(record.keys))
            if shared > resident:
                chain = KeyChain(record.keys, shared)
                chain += keys[shared:]
                keys, kind = chain, "ssd_exact_id"
        if len(keys) < usable:
            keys += self.keys(tokens[len(keys) * self.block_size:usable * self.block_size],
                              request.scope, keys[-1] if keys else b"")
        return keys, kind

    def _take(self, n: int) -> list[int]:
        """Blocks for a restore: evict unused (backed-up) state first, then allocate."""
        short = n - self.pool.num_free
        if short > 0:
            self.index.evict(short)
        return self.pool.allocate(n)

    def _check_near_miss(self, tokens: np.ndarray, session: TerminalSession, shared: int) -> None:
        """Log a request that shares most of a resident prefix but forks before its end."""
        total = len(session.tokens)
        if (shared < NEAR_MISS_MIN_TOKENS or shared <= NEAR_MISS_MIN_FRACTION * total
                or shared >= total or shared >= len(tokens)):
            return
        lo, hi = max(0, shared - 8), shared + 8
        miss = NearMiss(shared, shared, total, self._describe(tokens[lo:hi].tolist()),
                        self._describe(session.tokens[lo:hi].tolist()))
        self.near_misses.append(miss)
        del self.near_misses[:-32]
        self.stats.near_misses += 1
        log.warning("prefix near-miss at token %d of a %d-token resident prefix: request has "
                    "%r (ids %s), resident has %r (ids %s)", shared, total, miss.ours,
                    tokens[shared:hi].tolist(), miss.theirs, session.tokens[shared:hi].tolist())

    # -- lifecycle ----------------------------------------------------------------------

    def commit(self, request_id: str, tokens: TokenIds, block_table: Sequence[int],
               num_computed: int) -> None:
        """Index blocks this request has just completed (in prefill or decode)."""
        live = self._live.get(request_id)
        if live is None:
            return
        full = num_computed // self.block_size
        if full > len(live.keys):
            parent = live.keys[-1] if live.keys else b""
            start = len(live.keys) * self.block_size
            new_blocks = token_array(tokens[start:full * self.block_size])
            live.keys += self.keys(new_blocks, live.request.scope, parent)
        if full > live.registered:
            indexed = self.index.register(live.keys[live.registered:full], block_table[live.registered:full],
                                          live.request.scope)
            live.blocks.extend(indexed)
            live.registered = full

    def release(self, request_id: str, blocks: Sequence[int], tokens: Optional[TokenIds] = None) -> None:
        """The request let go of ``blocks`` (already freed in the pool). With ``tokens``, it
        finished successfully and its terminal state stays resident for the next turn."""
        live = self._live.pop(request_id, None)
        if live is not None and tokens is not None:
            indexed = live.blocks[:live.registered].astype(np.intp)  # intp: gathers index with it fastest
            keys = live.keys.prefix(live.registered).settled()
            session = self.sessions.record(live.request.cache_id, live.request.scope, tokens, keys,
                                           indexed, self._epochs(live, indexed), live.parent)
            if self.ssd is not None and self.ssd.config.write_through:  # before the record naming them
                held = indexed >= 0
                self.ssd.write_through(live.request.scope, [k for k, h in zip(keys, held) if h],
                                       indexed[held].tolist())
            if self.ssd is not None and session.cache_id is not None:
                self.ssd.record_session(SessionRecord(session.scope, session.cache_id, token_array(session.tokens),
                                                      tuple(session.keys), session.parent, session.round))
        self.index.released(blocks)

    def _epochs(self, live: _Live, indexed: np.ndarray) -> np.ndarray:
        """The registrations of a finished request's blocks: the adopted ones' as the match found
        them, those it committed gathered now (-1 for one evicted meanwhile: another key's)."""
        committed = indexed[len(live.epochs):]
        return np.concatenate((live.epochs, self.index.epochs(committed))) if len(committed) else live.epochs

    def evict(self, n: int) -> int:
        return self.index.evict(n)

    def forget(self, request: CacheRequest) -> None:
        """The id's terminal states are no longer wanted (its conversation ended); the blocks
        stay indexed, evictable as any unused ones."""
        if request.cache_id is not None:
            self.sessions.forget(request.scope, request.cache_id)

    def persist(self) -> None:
        """Back up every indexed block the SSD tier lacks, and wait until it is on disk."""
        entries = self.index.entries()
        if entries:
            scopes, keys, blocks = map(list, zip(*entries))
            self.ssd.backup(scopes, keys, blocks)
        self.ssd.writer.flush()

    def close(self) -> None:
        """Graceful shutdown: resident state to the SSD tier, which then closes."""
        if self.ssd is not None:
            self.persist()
            self.ssd.close()

    def clear(self) -> None:
        self.index.clear()
