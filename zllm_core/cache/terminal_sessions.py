"""Terminal states of finished requests: what the next turn of a conversation is matched against.

A terminal session is metadata (tokens, scope, block keys, parent, round); the K/V itself
lives in indexed blocks, so branches that share history share blocks and eviction of
unused blocks releases only what no branch is using. A server releases a conversation's
sessions with the rest of its state (`forget`, sent down by its conversation clock).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import numpy as np

from zllm_core.cache.token_ids import TokenIds, frozen_tokens

MAX_ROUNDS = 4  # states kept per cache id: intermediate states do not stay forever
# What an id's sessions hold per token of its latest, at most: each of its rounds (no longer
# than the latest) keeps its tokens (int32) and, per block of 16, a 32-byte key (65 bytes as
# an object), its tuple slot, block and epoch (8 bytes each).
BYTES_PER_TOKEN = MAX_ROUNDS * (4 + -(-(65 + 8 + 8 + 8) // 16))


@dataclass(frozen=True)
class TerminalSession:
    serial: int
    cache_id: Optional[str]
    scope: bytes
    tokens: TokenIds  # int32 token ids, prompt and output (read-only: an array or JoinedTokens)
    keys: Sequence[bytes]  # chain keys of its computed full blocks (never changed: a KeyChain or a tuple)
    blocks: np.ndarray  # the block indexed under each key when it finished (-1: none)
    epochs: np.ndarray  # and the index registration of each (PrefixIndex.resident checks both)
    parent: Optional[int]
    round: int


class TerminalSessions:
    def __init__(self, max_rounds: int = MAX_ROUNDS, max_tokens: int = 16 << 20):
        """`max_tokens` is a safety cap: sessions without an id (the engine used alone) have no
        conversation to be released with."""
        self.max_rounds = max_rounds
        self.max_tokens = max_tokens
        self._all: OrderedDict[int, TerminalSession] = OrderedDict()  # oldest first
        self._by_id: dict[tuple[bytes, str], list[int]] = {}
        self._num_tokens = 0
        self._serial = 0

    def __len__(self) -> int:
        return len(self._all)

    def record(self, cache_id: Optional[str], scope: bytes, tokens: TokenIds, keys: Sequence[bytes],
               blocks: np.ndarray, epochs: np.ndarray, parent: Optional[TerminalSession]) -> TerminalSession:
        self._serial += 1
        tokens = frozen_tokens(tokens)  # a read-only prompt is kept as it is, not copied
        session = TerminalSession(self._serial, cache_id, scope, tokens, keys, blocks, epochs,
                                  parent.serial if parent else None, parent.round + 1 if parent else 0)
        self._all[session.serial] = session
        self._num_tokens += len(session.tokens)
        if cache_id is not None:
            rounds = self._by_id.setdefault((scope, cache_id), [])
            rounds.append(session.serial)
            while len(rounds) > self.max_rounds:  # intermediate states do not stay forever
                self._remove(rounds[0])
        while self._num_tokens > self.max_tokens and len(self._all) > 1:
            self._remove(next(iter(self._all)))
        return session

    def forget(self, scope: bytes, cache_id: str) -> None:
        """Drops every round of the id's sessions."""
        for serial in list(self._by_id.get((scope, cache_id), ())):
            self._remove(serial)

    def latest(self, scope: bytes, cache_id: str) -> Optional[TerminalSession]:
        rounds = self._by_id.get((scope, cache_id))
        return self._all[rounds[-1]] if rounds else None

    def recent(self, scope: bytes, limit: int = 64) -> Iterator[TerminalSession]:
        """The most recent sessions of a scope, newest first."""
        found = 0
        for session in reversed(self._all.values()):
            if found == limit:
                return
            if session.scope == scope:
                found += 1
                yield session

    def _remove(self, serial: int) -> None:
        session = self._all.pop(serial)
        self._num_tokens -= len(session.tokens)
        if session.cache_id is not None:
            rounds = self._by_id[(session.scope, session.cache_id)]
            rounds.remove(serial)
            if not rounds:
                del self._by_id[(session.scope, session.cache_id)]
