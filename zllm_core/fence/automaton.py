"""Byte-level regular languages: a small expression tree compiled to a trimmed DFA.

Fences describe what may be generated (a tool call's tags, a JSON value under a schema) as an
expression over bytes; `compile_dfa` turns it into a DFA over byte classes (bytes that every
part of the expression treats alike share a class, so tables stay narrow). Every state of the
result can still reach acceptance, so "not dead" means "can still end validly"; `distance`
is the fewest bytes from each state to acceptance, which budget-aware closure uses.
"""
from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Union

import numpy as np


@dataclass(frozen=True)
class Lit:
    data: bytes


@dataclass(frozen=True)
class Bytes:
    """One byte from a set."""

    allowed: frozenset[int]


@dataclass(frozen=True)
class Seq:
    parts: tuple["Expr", ...]


@dataclass(frozen=True)
class Alt:
    options: tuple["Expr", ...]


@dataclass(frozen=True)
class Repeat:
    body: "Expr"
    lo: int = 0
    hi: int | None = None  # None: unbounded


@dataclass(frozen=True)
class Avoid:
    """The strings of `body` that contain none of `stops`, ASCII letters matched in any case
    (as the dialects' tag scanners match). Followed by a stop, it is "`body` up to the first
    stop" (stops must not overlap themselves)."""

    body: "Expr"
    stops: tuple[bytes, ...]


@dataclass(frozen=True)
class Compact:
    """`body`, compiled alone to a minimal DFA and embedded: a large sub-expression (a tool's
    arguments) then costs the expression around it its few DFA states, not its NFA's many,
    and each distinct one is compiled once."""

    body: "Expr"


@dataclass(frozen=True)
class Text:
    """Any bytes that do not contain one of `stops` (in any ASCII case); it may end anywhere."""

    stops: tuple[bytes, ...]


Expr = Union[Lit, Bytes, Seq, Alt, Repeat, Avoid, Compact, Text]
EMPTY = Lit(b"")
ANY_BYTES = Repeat(Bytes(frozenset(range(256))))


def seq(*parts: Expr) -> Expr:
    flat = [p for p in parts if p != EMPTY]
    return flat[0] if len(flat) == 1 else Seq(tuple(flat)) if flat else EMPTY


def alt(*options: Expr) -> Expr:
    unique = tuple(dict.fromkeys(options))
    return unique[0] if len(unique) == 1 else Alt(unique)


def byte_range(lo: int, hi: int) -> Bytes:
    return Bytes(frozenset(range(lo, hi + 1)))


def one_of(chars: Iterable[int]) -> Bytes:
    return Bytes(frozenset(chars))


def opt(e: Expr) -> Expr:
    return Repeat(e, 0, 1)


# Well-formed UTF-8 multi-byte characters as byte ranges per position (RFC 3629, table 3-7):
# no overlong forms, no surrogates, nothing past U+10FFFF.
CONT = (0x80, 0xBF)
UTF8_RANGES = (((0xC2, 0xDF), CONT), ((0xE0, 0xE0), (0xA0, 0xBF), CONT), ((0xE1, 0xEC), CONT, CONT),
               ((0xED, 0xED), (0x80, 0x9F), CONT), ((0xEE, 0xEF), CONT, CONT),
               ((0xF0, 0xF0), (0x90, 0xBF), CONT, CONT), ((0xF1, 0xF3), CONT, CONT, CONT),
               ((0xF4, 0xF4), (0x80, 0x8F), CONT, CONT))


def utf8_multibyte(line_separators: bool = True) -> Expr:
    """One well-formed UTF-8 character of two to four bytes; `line_separators=False` leaves
    out U+2028 and U+2029 (E2 80 A8 and E2 80 A9)."""
    options = [seq(*(byte_range(lo, hi) for lo, hi in ranges)) for ranges in UTF8_RANGES]
    if line_separators:
        return alt(*options)
    cont = byte_range(*CONT)
    e2 = alt(seq(Lit(b"\xe2"), byte_range(0x81, 0xBF), cont),
             seq(Lit(b"\xe2\x80"), one_of(b for b in range(0x80, 0xC0) if b not in (0xA8, 0xA9))))
    e1_ec = seq(one_of([0xE1, *range(0xE3, 0xED)]), cont, cont)  # UTF8_RANGES[2] less E2
    return alt(*options[:2], e1_ec, e2, *options[3:])


MAX_NFA_STATES = 400_000  # a client's schema may not make the server build more (~100 MB)


class _Nfa:
    """Thompson construction: states with epsilon edges and byte-set edges."""

    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[frozenset[int], int]]] = []
        self._closures: dict[int, frozenset[int]] = {}  # filled once the NFA is built

    def state(self) -> int:
        if len(self.eps) >= MAX_NFA_STATES:
            raise ValueError(f"the grammar is too large (more than {MAX_NFA_STATES} automaton states)")
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, e: Expr, start: int) -> int:
        """Adds `e` from `start`; returns its end state."""
        if isinstance(e, Lit):
            for b in e.data:
                nxt = self.state()
                self.edges[start].append((frozenset((b,)), nxt))
                start = nxt
            return start
        if isinstance(e, Bytes):
            end = self.state()
            self.edges[start].append((e.allowed, end))
            return end
        if isinstance(e, Seq):
            for part in e.parts:
                start = self.build(part, start)
            return start
        if isinstance(e, Text):
            return self._embed(_avoiding(ANY_BYTES, e.stops), start)
        if isinstance(e, Avoid):
            # In NFA form the product with the stops' automaton multiplies every state of the
            # body by every stop prefix (~20x a DSML value); as DFAs it stays small.
            return self._embed(_avoiding(e.body, e.stops), start)
        if isinstance(e, Compact):
            return self._embed(_compiled(e.body), start)
        if isinstance(e, Alt):
            end = self.state()
            for option in e.options:
                s = self.state()
                self.eps[start].append(s)
                self.eps[self.build(option, s)].append(end)
            return end
        return self._repeat(e, start)

    def _embed(self, dfa: "Dfa", start: int) -> int:
        """A DFA as part of this NFA, one state per DFA state; returns the end state."""
        ids = [self.state() for _ in range(len(dfa.table) - 1)]
        self.eps[start].append(ids[dfa.start])  # a fresh first state: the DFA may loop back to it
        end = self.state()
        members = [frozenset(np.flatnonzero(dfa.classes == c).tolist()) for c in range(dfa.table.shape[1])]
        dead = dfa.dead
        for q, row in enumerate(dfa.table[:-1].tolist()):
            targets: dict[int, set[int]] = {}
            for c, target in enumerate(row):
                if target != dead:
                    targets.setdefault(target, set()).update(members[c])
            self.edges[ids[q]].extend((frozenset(bs), ids[t]) for t, bs in targets.items())
            if dfa.accepting[q]:
                self.eps[ids[q]].append(end)
        return end

    def _repeat(self, e: Repeat, start: int) -> int:
        for _ in range(e.lo):
            start = self.build(e.body, start)
        if e.hi is None:
            loop = self.state()
            self.eps[start].append(loop)
            self.eps[self.build(e.body, loop)].append(loop)
            return loop
        end = self.state()
        self.eps[start].append(end)
        for _ in range(e.hi - e.lo):
            start = self.build(e.body, start)
            self.eps[start].append(end)
        return end

    def closure(self, states: Iterable[int]) -> frozenset[int]:
        """The states reachable by epsilon edges: a union of each state's own closure, which
        is computed once (subset construction asks for the same targets again and again)."""
        memo = self._closures
        parts = []
        for s in states:
            found = memo.get(s)
            if found is None:
                seen, todo = {s}, [s]
                while todo:
                    for t in self.eps[todo.pop()]:
                        if t not in seen:
                            seen.add(t)
                            todo.append(t)
                found = memo[s] = frozenset(seen)
            parts.append(found)
        return parts[0] if len(parts) == 1 else frozenset().union(*parts)


_FOLD = bytes(range(256)).lower()  # ASCII letters to lower case, every other byte itself


def _aho_corasick(stops: tuple[bytes, ...]) -> tuple[list[list[int]], set[int]]:
    """The complete goto table (node x byte -> node), ASCII case folded, and the nodes that
    end a stop."""
    children: list[dict[int, int]] = [{}]
    terminal: set[int] = set()
    for stop in stops:
        node = 0
        for b in stop.lower():
            node = children[node].setdefault(b, len(children))
            if node == len(children):
                children.append({})
        terminal.add(node)
    goto = [[0] * 256 for _ in children]
    fail = [0] * len(children)
    order = deque()
    for b in range(256):
        child = children[0].get(_FOLD[b])
        if child is not None:
            goto[0][b] = child
            if b == _FOLD[b]:
                order.append(child)
    while order:
        node = order.popleft()
        if fail[node] in terminal:
            terminal.add(node)
        for b in range(256):
            child = children[node].get(_FOLD[b])
            if child is None:
                goto[node][b] = goto[fail[node]][b]
            else:
                goto[node][b] = child
                if b == _FOLD[b]:
                    fail[child] = goto[fail[node]][b]
                    order.append(child)
    return goto, terminal


@functools.lru_cache(maxsize=256)
def _compiled(body: Expr) -> "Dfa":
    return compile_dfa(body)


@functools.lru_cache(maxsize=256)
def _avoiding(body: Expr, stops: tuple[bytes, ...]) -> "Dfa":
    """A minimal DFA over bytes for the strings of `body` that hold no stop: the body's
    minimal DFA run in step with Aho-Corasick over the stops, as pairs (body state, stop
    prefix); a byte that would complete a stop leads nowhere. Cached: every string parameter
    of a tool set has the same body and stops."""
    inner = _compiled(body)
    goto, terminal = _aho_corasick(stops)
    goto = np.array(goto, dtype=np.int64)
    ends_stop = np.zeros(len(goto), dtype=bool)
    ends_stop[list(terminal)] = True
    by_byte = inner.table[:, inner.classes].astype(np.int64)  # [body states, 256]
    ids = {(inner.start, 0): 0}
    pairs = [(inner.start, 0)]
    rows: list[list[int]] = []
    for q, node in pairs:  # grows as new pairs are reached: breadth first
        nq, nn = by_byte[q], goto[node]
        live = np.flatnonzero((nq != inner.dead) & ~ends_stop[nn])
        targets, where = np.unique(nq[live] * len(goto) + nn[live], return_inverse=True)
        numbers = []
        for t in targets.tolist():
            pair = divmod(t, len(goto))
            if pair not in ids:
                ids[pair] = len(pairs)
                pairs.append(pair)
            numbers.append(ids[pair])
        row = np.full(256, -1, dtype=np.int64)
        row[live] = np.array(numbers, dtype=np.int64)[where.reshape(-1)] if numbers else -1
        rows.append(row.tolist())
    accepting = [bool(inner.accepting[q]) for q, _ in pairs]
    return _trimmed(rows, accepting, np.arange(256, dtype=np.uint8))


@dataclass
class Dfa:
    """`table[state, byte_class]` -> next state, `dead` (== num_states) where nothing follows."""

    table: np.ndarray       # int32 [num_states + 1, num_classes]; the last row is the dead state
    classes: np.ndarray     # uint8 [256]: byte -> class
    accepting: np.ndarray   # bool [num_states + 1]
    distance: np.ndarray    # int32 [num_states + 1]: fewest bytes to acceptance (dead: huge)
    start: int = 0

    @property
    def dead(self) -> int:
        return len(self.table) - 1

    def step(self, state: int, data: bytes) -> int:
        for b in data:
            state = int(self.table[state, self.classes[b]])
        return state


UNREACHABLE = np.iinfo(np.int32).max // 2


def compile_dfa(e: Expr, max_states: int = 200_000) -> Dfa:
    """Subset construction over byte classes, then trimming to states that can still accept."""
    nfa = _Nfa()
    start = nfa.state()
    accept = nfa.build(e, start)
    classes, class_sets = _byte_classes(nfa)
    num_classes = int(classes.max()) + 1
    ids: dict[frozenset[int], int] = {}
    rows: list[list[int]] = []
    order: list[frozenset[int]] = []
    first = nfa.closure([start])
    ids[first] = 0
    order.append(first)
    todo = deque([first])
    while todo:
        current = todo.popleft()
        moves: dict[int, set[int]] = {}
        for s in current:
            for allowed, t in nfa.edges[s]:
                for c in class_sets[allowed]:
                    moves.setdefault(c, set()).add(t)
        row = [-1] * num_classes
        for c, targets in moves.items():
            nxt = nfa.closure(targets)
            if nxt not in ids:
                if len(ids) >= max_states:
                    raise ValueError(f"the grammar needs more than {max_states} automaton states")
                ids[nxt] = len(ids)
                order.append(nxt)
                todo.append(nxt)
            row[c] = ids[nxt]
        rows.append(row)
    accepting = [accept in s for s in order]
    return _trimmed(rows, accepting, classes)


def _byte_classes(nfa: _Nfa) -> tuple[np.ndarray, dict[frozenset[int], list[int]]]:
    """Partition 0..255 so that every edge's byte set is a union of classes."""
    sets = {allowed for edges in nfa.edges for allowed, _ in edges}
    signature: dict[int, tuple[bool, ...]] = {}
    ordered = sorted(sets, key=sorted)
    for b in range(256):
        signature[b] = tuple(b in s for s in ordered)
    class_ids: dict[tuple[bool, ...], int] = {}
    classes = np.zeros(256, dtype=np.uint8)
    for b in range(256):
        classes[b] = class_ids.setdefault(signature[b], len(class_ids))
    members = {s: sorted({int(classes[b]) for b in s}) for s in sets}
    return classes, members


def _trimmed(rows: list[list[int]], accepting: list[bool], classes: np.ndarray) -> Dfa:
    n, width = len(rows), int(classes.max()) + 1
    table = np.full((n + 1, width), n, dtype=np.int32)
    if n:
        table[:n] = np.array(rows, dtype=np.int32).reshape(n, width)
        table[table < 0] = n
    acc = np.array(accepting + [False])
    distance = _distances(table, acc)
    alive = distance < UNREACHABLE
    if not alive[0]:
        raise ValueError("the grammar accepts nothing")
    # Renumber the live states, the start first, and send every edge into a dead one to `dead`.
    keep = np.flatnonzero(alive[:n])
    new_id = np.full(n + 1, len(keep), dtype=np.int32)
    new_id[keep] = np.arange(len(keep), dtype=np.int32)
    trimmed = new_id[table[np.append(keep, n)]]
    # Bytes whose columns agree once dead edges are cut fall into one class.
    columns, merged = np.unique(trimmed, axis=1, return_inverse=True)
    return _minimal(columns, merged.reshape(-1)[classes].astype(np.uint8), np.append(acc[keep], False),
                    np.append(distance[keep], UNREACHABLE))


def _minimal(table: np.ndarray, classes: np.ndarray, accepting: np.ndarray, distance: np.ndarray) -> Dfa:
    """Merge equivalent states (Moore's refinement). Subset construction leaves many: inside a
    string, "after an ASCII character" and "after a multi-byte one" are different NFA state
    sets with one future, and a fence's rows are computed per state, so each merge saves a walk
    and lets the loop walk see the string's one looping state."""
    # Equivalent states share acceptance and distance, so refinement starts from that split
    # (which already separates the states along a literal, the slow case for Moore).
    _, initial = np.unique(distance.astype(np.int64) * 2 + accepting, return_inverse=True)
    seed = 0
    while True:
        block = _refined(table, initial.reshape(-1).astype(np.int64), seed)
        first = np.unique(block, return_index=True)[1]
        rep = first[block]
        # Hashing may (very rarely) merge two states: keep the partition only if it is exact.
        if np.array_equal(block[table], block[table[rep]]) and np.array_equal(initial[rep], initial):
            break
        seed += 1
    # Renumber by first appearance: the start (state 0) stays first and the dead state, alone
    # in its block, stays last.
    order = np.argsort(first)
    new_id = np.empty_like(order)
    new_id[order] = np.arange(len(order))
    reps = first[order]
    return Dfa(new_id[block[table[reps]]].astype(np.int32), classes, accepting[reps], distance[reps])


def _refined(table: np.ndarray, block: np.ndarray, seed: int) -> np.ndarray:
    """Moore's rounds: split blocks by their successors' blocks until no block splits. A row is
    told apart by a random weighted sum of its successor blocks (wrapping int64), its block
    included, so a round is one vectorised pass and one sort."""
    rng = np.random.default_rng(seed)
    weights = rng.integers(1, 2 ** 62, size=table.shape[1], dtype=np.int64)
    own = np.int64(rng.integers(1, 2 ** 62))
    count = -1
    while block.max() + 1 != count:
        count = block.max() + 1
        _, block = np.unique((block[table] * weights).sum(axis=1) + block * own, return_inverse=True)
        block = block.reshape(-1).astype(np.int64)
    return block


def _distances(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Fewest bytes from each state to an accepting one (BFS over reversed edges)."""
    n = len(table)
    reverse: list[set[int]] = [set() for _ in range(n)]
    for s in range(n - 1):
        for t in set(table[s].tolist()):
            reverse[t].add(s)
    dist = np.full(n, UNREACHABLE, dtype=np.int32)
    todo = deque(np.flatnonzero(accepting).tolist())
    dist[list(todo)] = 0
    while todo:
        t = todo.popleft()
        for s in reverse[t]:
            if dist[s] == UNREACHABLE:
                dist[s] = dist[t] + 1
                todo.append(s)
    dist[n - 1] = UNREACHABLE
    return dist
