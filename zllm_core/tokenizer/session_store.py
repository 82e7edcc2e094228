"""Tokenization sessions: per conversation, the rendered text, its token ids and where each
token ends (csrc/session_text.h, csrc/token_run.h), kept under a memory budget with LRU eviction.

A request finds its session by an explicit key (prompt_cache_key, previous_response_id, a
session header) or by the longest text prefix it shares with a recent session of its scope.
Each session's text is hashed in blocks of `stride` code points, each block on its own (all
but the last `lag` code points, which change from call to call), and (scope, block index,
hash) indexes the sessions. A lookup walks back from the request's last
full block to the first one a session holds at the same index, and takes that session when
it also holds a logarithmic sample of the earlier blocks (1, 2, 4, ... back, and the first):
for a continuing conversation that hashes a few dozen blocks, not the whole prompt. A hash
collision or an unsampled difference only picks a poor session: the repair measures the real
common prefix, so exactness never rests on the index.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field

from zllm_core import _native
from zllm_core.tokenizer.exact_spans import ExactSpans

CHECKPOINT_STRIDE = 4096  # code points a block
# The end of a conversation changes every call (a template re-renders the last turn, new text
# arrives), so blocks within CHECKPOINT_LAG code points of it are not indexed yet, and the
# index grows CHECKPOINT_BATCH blocks at a time: most calls then leave the index alone. A
# lookup still finds the session by its earlier blocks; the repair measures the rest.
CHECKPOINT_LAG = 8192
CHECKPOINT_BATCH = 2


_session_ids = itertools.count(1)


@dataclass(eq=False)
class Session:
    scope: str
    text: _native.SessionText  # the text as tokenized (normalised, no surrogates), compact
    tokens: _native.TokenRun  # ids and where each ends, in code points
    checkpoints: list[int] = field(default_factory=list)  # hash of each full block of
    # CHECKPOINT_STRIDE code points, set by the store
    keys: set[str] = field(default_factory=set)
    # The conversation's exact ids (exact_spans.py): they live and are evicted with its text.
    spans: ExactSpans = field(default_factory=ExactSpans)
    id: int = field(default_factory=lambda: next(_session_ids))

    @property
    def nbytes(self) -> int:
        # a checkpoint: its list slot and its int (8 + 28 bytes in CPython)
        return self.text.nbytes + self.tokens.nbytes + 36 * len(self.checkpoints) + self.spans.nbytes + 256


@dataclass
class StoreStats:
    sessions: int = 0
    bytes: int = 0
    evictions: int = 0


class SessionStore:
    def __init__(self, budget_bytes: int, stride: int = CHECKPOINT_STRIDE, lag: int = CHECKPOINT_LAG,
                 batch: int = CHECKPOINT_BATCH):
        self.budget_bytes = budget_bytes
        self.stride, self.lag, self.batch = stride, lag, batch
        self.stats = StoreStats()
        self._lru: OrderedDict[int, Session] = OrderedDict()
        self._by_key: dict[tuple[str, str], Session] = {}
        self._by_checkpoint: dict[tuple[str, int, int], Session] = {}  # (scope, block, hash)
        self._sizes: dict[int, int] = {}

    # ---- lookup
    def find(self, scope: str, text: str | None, key: str | None) -> Session | None:
        """By key, else (unless `text` is None) by the longest text prefix."""
        session = self._by_key.get((scope, key)) if key is not None else None
        return session or (self.longest_prefix(scope, text) if text is not None else None)

    def longest_prefix(self, scope: str, text: str) -> Session | None:
        for k in range(len(text) // self.stride - 1, -1, -1):
            session = self._by_checkpoint.get((scope, k, _native.block_hash(text, k, self.stride)))
            if session is not None and self._holds_sample(session, text, k):
                return session
        return None

    def _holds_sample(self, session: Session, text: str, k: int) -> bool:
        """Whether session's blocks k - 1, k - 2, k - 4, ... and 0 equal text's."""
        step = 1
        while k > 0:
            k = max(0, k - step)
            if session.checkpoints[k] != _native.block_hash(text, k, self.stride):
                return False
            step *= 2
        return True

    # ---- updates
    def add(self, session: Session, key: str | None, text: str, forked_at: int = 0) -> None:
        """Adds `session`, whose text is `text`; a fork's first `forked_at` code points are its
        parent's. Those blocks are indexed for the fork even within the lag: they have stopped
        changing, and left to the parent they would lead the fork's next call (a conversation
        after a compaction, say) back to the parent, to fork it again."""
        self._lru[session.id] = session
        end = max(self._indexed_blocks(text), forked_at // self.stride)
        session.checkpoints = _native.checkpoint_hashes(text, self.stride, 0, end).tolist()
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

    def reindex(self, session: Session, text: str, diverged_at: int) -> None:
        """`session.text` has become `text`, which shares the old text's first `diverged_at`
        code points: the blocks from there are indexed afresh."""
        indexed, end = len(session.checkpoints), self._indexed_blocks(text)
        if end == indexed and diverged_at >= indexed * self.stride:
            return  # most calls: the change lies after the indexed blocks, which stay as they are
        keep = min(diverged_at // self.stride, indexed, end)
        self._unindex_checkpoints(session, keep)
        del session.checkpoints[keep:]
        session.checkpoints += _native.checkpoint_hashes(text, self.stride, keep, end).tolist()
        self._index_checkpoints(session, keep)

    def _indexed_blocks(self, text: str) -> int:
        """Blocks ending `lag` before the text's end, in whole batches, and the first block
        always: a short conversation (a system prompt and a few turns) is found by it."""
        blocks = max(0, len(text) - self.lag) // self.stride
        return max(blocks - blocks % self.batch, min(1, len(text) // self.stride))

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
        for k in range(start, len(session.checkpoints)):
            entry = (session.scope, k, session.checkpoints[k])
            if self._by_checkpoint.get(entry) is session:
                del self._by_checkpoint[entry]

    def _index_checkpoints(self, session: Session, start: int) -> None:
        for k in range(start, len(session.checkpoints)):
            self._by_checkpoint[(session.scope, k, session.checkpoints[k])] = session
