"""A resent request body is parsed from where it stops resending.

Agents resend their whole conversation as JSON on every call: a megabyte of body of which the
last few kilobytes are new. When a body begins with the bytes of a recent body (same tenant,
same route) through the end of some of that body's conversation items (its largest top-level
array: `messages`, `input`), it takes those items' parsed objects, and orjson parses the
rest: the same text with the shared items cut out of the array. csrc/json_items.cpp finds
where items end and checks that the cut leaves the same document (a comma and then an item,
or the array's end; no later key that would replace the array). Equal bytes parse to equal
values, so the result equals parsing the whole body; anything unexpected parses it whole.

The items handed out are the very objects of the earlier request, which the message memo
then recognises by identity: nothing may mutate a parsed body.
"""
from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable

import orjson

from zllm_core import _native

MIN_BYTES = 64 << 10  # smaller bodies parse whole: a lookup would cost about what it saves
PER_ROUTE = 16  # bodies kept per (tenant, route): a few concurrent conversations and branches
BUDGET_BYTES = 256 << 20


@dataclass(frozen=True, eq=False)
class _Body:
    data: bytes
    key: str  # the conversation's top-level key
    open: int  # the offset of its '['
    ends: list[int]  # where each of its items ends
    items: list[Any]  # the items, parsed

    @property
    def nbytes(self) -> int:
        # The bytes, and their parsed items (shared with the message memo while it keeps them):
        # about 1.5x their JSON, as the memo measured for chat histories.
        return len(self.data) * 5 // 2

    def parse_after(self, body: bytes, shared: int) -> tuple[Any, _Body] | None:
        """`body`, which equals this one's first `shared` bytes, parsed reusing the items
        those bytes hold (and what to remember it as), or None to parse it whole."""
        k = bisect.bisect_right(self.ends, shared)
        after = _native.json_items_after(body, self.ends[k - 1], self.key) if k else None
        if after is None:
            return None
        first, ends = after
        try:
            doc = orjson.loads(body[:self.open + 1] + body[first:])
        except orjson.JSONDecodeError:
            return None
        new = doc[self.key]
        if not isinstance(new, list) or len(new) != len(ends):
            return None  # the scan and the parser disagree: trust neither
        doc[self.key] = items = self.items[:k] + new
        return doc, _Body(body, self.key, self.open, self.ends[:k] + ends, items)


class ResentBodies:
    def __init__(self, budget_bytes: int = BUDGET_BYTES, per_route: int = PER_ROUTE, min_bytes: int = MIN_BYTES):
        self.budget_bytes, self.per_route, self.min_bytes = budget_bytes, per_route, min_bytes
        self.hits = 0  # bodies parsed from where they stopped resending
        self._routes: OrderedDict[Hashable, list[_Body]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def loads(self, body: bytes, route: Hashable, parse: Callable[[bytes], Any]) -> Any:
        """`parse(body)`'s value; `route` (tenant and path) scopes what bodies it may reuse."""
        if len(body) < self.min_bytes:
            return parse(body)
        base, shared = self._closest(route, body)
        found = base.parse_after(body, shared) if base is not None else None
        if found is None:
            doc = parse(body)
            found = doc, _scanned(body, doc)
        else:
            self.hits += 1
        doc, kept = found
        if kept is not None:
            self._keep(route, kept, base)
        return doc

    def _closest(self, route: Hashable, body: bytes) -> tuple[_Body | None, int]:
        """The kept body sharing the most bytes with `body` (a continued one ends the search)."""
        with self._lock:
            candidates = list(self._routes.get(route, ()))
        best, shared = None, 0
        for c in candidates:
            n = _native.common_bytes(body, c.data)
            if n > shared:
                best, shared = c, n
            if n >= c.ends[-1]:
                break
        return best, shared

    def _keep(self, route: Hashable, kept: _Body, base: _Body | None) -> None:
        with self._lock:
            bodies = self._routes.pop(route, [])
            if base is not None and base in bodies and kept.ends[:len(base.ends)] == base.ends:
                bodies.remove(base)  # continued whole: the new body stands for it
                self._bytes -= base.nbytes
            bodies.insert(0, kept)
            self._bytes += kept.nbytes
            for dropped in bodies[self.per_route:]:
                self._bytes -= dropped.nbytes
            self._routes[route] = bodies[:self.per_route]
            while self._bytes > self.budget_bytes and self._routes:
                _, dropped = self._routes.popitem(last=False)
                self._bytes -= sum(b.nbytes for b in dropped)


def _scanned(body: bytes, doc: Any) -> _Body | None:
    """A body parsed whole, with where its conversation items end (None: nothing to reuse)."""
    found = _native.json_conversation_items(body) if isinstance(doc, dict) else None
    if found is None:
        return None
    key, open_, ends = found
    items = doc.get(key)
    if not isinstance(items, list) or len(items) != len(ends):
        return None  # a body the scan read differently (not UTF-8: parsed by the standard parser)
    return _Body(body, key, open_, ends, items)
