"""One eviction clock for everything the server keeps per conversation.

A conversation's state lives in several stores, each keyed its own way: the message memo (its
validated, converted history, by first item), the incremental renderer (its rendered text and
window, by first messages), the tokenizer session with its exact spans (by session), the
recent response records (by response id) and, on the engine thread, the prefix cache's
terminal sessions (by conversation id). Bounded apart, a busy server would evict a
conversation's tokenizer session and keep its render state, or the reverse. So the request
path, once it knows the conversation's id (server/prompt.py), files each state the request
used as a `Held` (its store's key, its size in bytes, how to release it), and this clock keeps
one LRU of conversation ids under one budget over all of them: past the budget the least
recently used conversation is released whole, every store at once.

A state belongs to the conversation that used it last (two conversations may open alike and
share a memo or render entry). One id may name several live conversations (Anthropic's
`metadata.user_id` names a Claude Code session: its main agent, sub-agents and side calls), so
an id keeps up to `per_kind` states of each kind, least recently used released first: that
also lets go of the state a conversation left behind (a tokenizer session it forked from).
A conversation with a request running (`in_use`) is never evicted: its answer is recorded
into its state after the generation. Shared objects (a prompt string the renderer and the
exact spans both keep) are charged to each store holding them: the budget bounds from above.

Releases run outside the clock's lock and each store checks what it drops, so a release that
races a new request of the same conversation only costs that request's state a rebuild; a
dropped state never makes a prompt inexact (the stores fall back to full work).
"""
from __future__ import annotations

import contextlib
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Iterator

PER_KIND = 8  # states of one kind an id keeps (its live conversations and branches)


@dataclass(frozen=True)
class Held:
    """A conversation's state in one store."""

    kind: str  # the store: "memo", "render", "tokenizer", "response", "terminal"
    key: Hashable  # the state's key in its store (one holding per kind and key)
    nbytes: int
    release: Callable[[], None]  # drops it from its store; a no-op if the store already did


@dataclass
class ClockStats:
    conversations: int = 0
    bytes: int = 0
    evictions: int = 0  # conversations released by the budget
    released: int = 0  # states released (by evictions and by `per_kind`)


class _Conversation:
    def __init__(self) -> None:
        self.held: OrderedDict[tuple[str, Hashable], Held] = OrderedDict()  # least recently held first
        self.nbytes = 0
        self.users = 0  # requests running


class ConversationClock:
    def __init__(self, budget_bytes: int, per_kind: int = PER_KIND):
        self.budget_bytes = budget_bytes
        self.per_kind = per_kind
        self.stats = ClockStats()
        self._lock = threading.Lock()
        self._lru: OrderedDict[Hashable, _Conversation] = OrderedDict()  # least recently used first
        self._owner: dict[tuple[str, Hashable], Hashable] = {}  # (kind, key) -> conversation holding it

    def touch(self, conversation: Hashable, held: Iterable[Held] = ()) -> None:
        """`conversation` becomes the most recently used and holds `held` (a state held again
        updates its size; one another conversation held moves here), then the least recently
        used conversations are released down to the budget."""
        with self._lock:
            conv = self._newest(conversation)
            released = [old for h in held for old in self._hold(conversation, conv, h)]
            released = self._counted(released + self._evict())
        _release(released)

    def hold(self, conversation: Hashable, held: Held) -> None:
        """`touch` without moving the conversation in the LRU (a state that grew after its
        request, such as the answer recorded into it); a conversation evicted since holds
        nothing more, and `held` is released."""
        with self._lock:
            conv = self._lru.get(conversation)
            released = [held] if conv is None else self._counted([*self._hold(conversation, conv, held),
                                                                  *self._evict()])
        _release(released)

    @contextlib.contextmanager
    def in_use(self, conversation: Hashable) -> Iterator[None]:
        """While the block runs the conversation is not evicted (the budget may be exceeded
        while every conversation over it is running)."""
        with self._lock:
            conv = self._newest(conversation)
            conv.users += 1
        try:
            yield
        finally:
            with self._lock:
                conv.users -= 1
                released = self._counted(self._evict())
            _release(released)

    def holds(self, conversation: Hashable) -> list[Held]:
        """What `conversation` holds, least recently held first (for tests and diagnostics)."""
        with self._lock:
            conv = self._lru.get(conversation)
            return list(conv.held.values()) if conv is not None else []

    # ---- under the lock
    def _newest(self, name: Hashable) -> _Conversation:
        """The conversation, made the most recently used (new if unknown)."""
        conv = self._lru.pop(name, None) or _Conversation()
        self._lru[name] = conv
        return conv

    def _hold(self, name: Hashable, conv: _Conversation, held: Held) -> list[Held]:
        slot = (held.kind, held.key)
        owner = self._owner.get(slot)
        if owner is not None and owner != name:  # used last by this conversation: it is charged here
            other = self._lru[owner]
            self._unhold(other, slot)
            if not other.held and not other.users:
                del self._lru[owner]
        old = conv.held.pop(slot, None)
        conv.nbytes += held.nbytes - (old.nbytes if old is not None else 0)
        self.stats.bytes += held.nbytes - (old.nbytes if old is not None else 0)
        conv.held[slot] = held
        self._owner[slot] = name
        same_kind = [s for s in conv.held if s[0] == held.kind]
        return [self._unhold(conv, s) for s in same_kind[:max(0, len(same_kind) - self.per_kind)]]

    def _unhold(self, conv: _Conversation, slot: tuple[str, Hashable]) -> Held:
        held = conv.held.pop(slot)
        del self._owner[slot]
        conv.nbytes -= held.nbytes
        self.stats.bytes -= held.nbytes
        return held

    def _evict(self) -> list[Held]:
        """Conversations released, least recently used first, down to the budget; the most
        recently used one and those in use stay."""
        victims, over = [], self.stats.bytes - self.budget_bytes
        if over > 0 and self._lru:
            newest = next(reversed(self._lru))
            for name, conv in self._lru.items():  # oldest first; only as far as it takes
                if over <= 0 or name == newest:
                    break
                if not conv.users:
                    victims.append(name)
                    over -= conv.nbytes
        released = []
        for name in victims:
            conv = self._lru.pop(name)
            released += [self._unhold(conv, slot) for slot in list(conv.held)]
        self.stats.evictions += len(victims)
        self.stats.conversations = len(self._lru)
        return released

    def _counted(self, released: list[Held]) -> list[Held]:
        self.stats.released += len(released)
        return released


def json_bytes(value: Any) -> int:
    """What a parsed JSON value occupies in memory, its containers' contents included."""
    n = sys.getsizeof(value)
    if isinstance(value, dict):
        return n + sum(sys.getsizeof(k) + json_bytes(v) for k, v in value.items())
    if isinstance(value, list):
        return n + sum(json_bytes(v) for v in value)
    return n


def _release(held: list[Held]) -> None:
    for h in held:
        h.release()
