"""Tokenization sessions: per conversation, the rendered text, its token ids and where each
token ends (csrc/session_text.h, csrc/token_run.h), kept under a memory budget with LRU eviction.

A request finds its session by an explicit key (prompt_cache_key, previous_response_id, a
session header) or by the longest text prefix it shares with a recent session of its scope:
chained hashes of the text's code points at every `stride` of them index the sessions, and a binary
search over the request's own checkpoint hashes finds the longest indexed one (sharing a
prefix up to checkpoint k implies sharing every earlier one). A hash collision only picks a
poor session; the repair measures the real common prefix, so exactness never rests on it.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field

from zllm_core import _native

CHECKPOINT_STRIDE = 4096  # code points between prefix checkpoints


_session_ids = itertools.count(1)


@dataclass(eq=False)
class Session:
    scope: str
    text: _native.SessionText  # the text as tokenized (normalised, no surrogates), compact
    tokens: _native.TokenRun  # ids and where each ends, in code points
    checkpoints: list[int] = field(default_factory=list)  # chained hashes of
    # text[:(k + 1) * CHECKPOINT_STRIDE], set by the store
    keys: set[str] = field(default_factory=set)
    id: int = field(default_factory=lambda: next(_session_ids))

    @property
    def nbytes(self) -> int:
        # a checkpoint: its list slot and its int (8 + 28 bytes in CPython)
        return self.text.nbytes + self.tokens.nbytes + 36 * len(self.checkpoints) + 256


@dataclass
class StoreStats:
    sessions: int = 0
    bytes: int = 0
    evictions: int = 0


class SessionStore:
    def __init__(self, budget_bytes: int, stride: int = CHECKPOINT_STRIDE):
        self.budget_bytes = budget_bytes
        self.stride = stride
        self.stats = StoreStats()
        self._lru: OrderedDict[int, Session] = OrderedDict()
        self._by_key: dict[tuple[str, str], Session] = {}
        self._by_checkpoint: dict[tuple[str, int], Session] = {}
        self._sizes: dict[int, int] = {}

    # ---- lookup
    def find(self, scope: str, text: str, key: str | None) -> Session | None:
        session = self._by_key.get((scope, key)) if key is not None else None
        return session or self.longest_prefix(scope, text)

    def longest_prefix(self, scope: str, text: str) -> Session | None:
        hashes = _native.checkpoint_hashes(text, self.stride, 0, 0)
        lo, hi, best = 0, len(hashes) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            hit = self._by_checkpoint.get((scope, int(hashes[mid])))
            if hit is not None:
                best, lo = hit, mid + 1
            else:
                hi = mid - 1
        return best

    # ---- updates
    def add(self, session: Session, key: str | None, text: str) -> None:
        """Adds `session`, whose text is `text`."""
        self._lru[session.id] = session
        session.checkpoints = _native.checkpoint_hashes(text, self.stride, 0, 0).tolist()
        self._index_checkpoints(session, 0)
        self.remember(session, key)

    def remember(self, session: Session, key: str | None) -> None:
        """Makes `key` find `session` (a key names one session at a time)."""
        if key is None:
            return
        old = self._by_key.get((session.scope, key))
        if old is not None and old is not session:
            old.keys.discard(key)
        self._by_key[(session.scope, key)] = session
        session.keys.add(key)

    def replace_text(self, session: Session, text: str, diverged_at: int) -> None:
        """`session.text` becomes `text`, which shares its first `diverged_at` code points."""
        session.text.replace_from(text, diverged_at)
        keep = min(diverged_at // self.stride, len(session.checkpoints))
        if keep == len(session.checkpoints) == len(text) // self.stride:
            return  # most calls: the change lies after the last checkpoint
        self._unindex_checkpoints(session, keep)
        parent = session.checkpoints[keep - 1] if keep else 0
        del session.checkpoints[keep:]
        session.checkpoints += _native.checkpoint_hashes(text, self.stride, keep, parent).tolist()
        self._index_checkpoints(session, keep)

    def touch(self, session: Session) -> None:
        """Marks `session` most recently used and evicts down to the budget."""
        self._lru.move_to_end(session.id)
        size = session.nbytes
        self.stats.bytes += size - self._sizes.get(session.id, 0)
        self._sizes[session.id] = size
        while self.stats.bytes > self.budget_bytes and len(self._lru) > 1:
            self.drop(next(iter(self._lru)))
            self.stats.evictions += 1
        self.stats.sessions = len(self._lru)

    def drop(self, session_id: int) -> bool:
        session = self._lru.pop(session_id, None)
        if session is None:
            return False
        self.stats.bytes -= self._sizes.pop(session_id, 0)
        for key in session.keys:
            if self._by_key.get((session.scope, key)) is session:
                del self._by_key[(session.scope, key)]
        self._unindex_checkpoints(session, 0)
        self.stats.sessions = len(self._lru)
        return True

    def get(self, session_id: int) -> Session | None:
        return self._lru.get(session_id)

    def _unindex_checkpoints(self, session: Session, start: int) -> None:
        for h in session.checkpoints[start:]:
            if self._by_checkpoint.get((session.scope, h)) is session:
                del self._by_checkpoint[(session.scope, h)]

    def _index_checkpoints(self, session: Session, start: int) -> None:
        for h in session.checkpoints[start:]:
            self._by_checkpoint[(session.scope, h)] = session
