"""A grammar compiled for one tokenizer: its DFA, and each state's allowed tokens, computed once.

Special tokens that spell a dialect's tags (`<tool_call>` is one token in Qwen's vocabulary)
stand for a pseudo byte in the DFA: a byte that never occurs in well-formed UTF-8, so such a
token fits exactly where the grammar places that tag and nowhere else (never inside a JSON
string, say). Every other special token is never allowed while a fence is active; the end
tokens are allowed exactly in accepting states.
"""
from __future__ import annotations

import functools
import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from zllm_core.fence.automaton import UTF8_RANGES, Dfa, Expr, Lit, alt, compile_dfa
from zllm_core.fence.vocab_index import NO_LIMIT, Row, VocabIndex

if TYPE_CHECKING:  # fences read only token_bytes, special_tokens and vocab_size of it
    from zllm_core.tokenizer.tokenizer import Tokenizer

PSEUDO_BYTES = (0xC0, 0xC1, *range(0xF5, 0x100))  # never part of well-formed UTF-8
LOOP_BYTES = 16  # a state with this many ASCII bytes returning to it takes the loop walk
ROW_CACHE = 1024  # bitmask rows kept per grammar (19 KB each for 150K tokens)
PREPARE_STATES = 256  # grammars this small get every state's row ahead of their requests


class FenceError(ValueError):
    """A grammar this tokenizer cannot produce, or one that accepts nothing."""


@dataclass(frozen=True, eq=False)
class FenceVocab:
    """What fences need of a tokenizer, built once per (tokenizer, tag set)."""

    index: VocabIndex
    end_ids: tuple[int, ...]
    pseudo: dict[str, int]  # tag text -> the pseudo byte its special token stands for

    @classmethod
    def build(cls, token_bytes: Sequence[bytes], special_tokens: dict[str, int], end_ids: Sequence[int],
              tags: Sequence[str] = ()) -> "FenceVocab":
        tagged = [t for t in dict.fromkeys(tags) if t in special_tokens]
        if len(tagged) > len(PSEUDO_BYTES):
            raise FenceError(f"at most {len(PSEUDO_BYTES)} tag tokens can be fenced, got {len(tagged)}")
        pseudo = dict(zip(tagged, PSEUDO_BYTES))
        walked = list(token_bytes)
        for tag, b in pseudo.items():
            walked[special_tokens[tag]] = bytes((b,))
        # Byte-level vocabularies have single-byte tokens for the pseudo bytes too: such bytes
        # never occur in well-formed text, so those tokens take no part in fenced output.
        pseudo_set = frozenset(PSEUDO_BYTES)
        excluded = set(end_ids) | {i for t, i in special_tokens.items() if t not in pseudo} | {
            i for i, t in enumerate(token_bytes) if not pseudo_set.isdisjoint(t)}
        return cls(VocabIndex.cached(walked, sorted(excluded)), tuple(end_ids), pseudo)

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer, end_ids: Sequence[int], tags: Sequence[str] = ()) -> "FenceVocab":
        """`tokenizer`'s vocabulary; `end_ids` end a turn (the model's EOS ids)."""
        return cls.build([tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)],
                         tokenizer.special_tokens, end_ids, tags)

    @property
    def vocab_size(self) -> int:
        return self.index.vocab_size

    def tag(self, text: str) -> Expr:
        """The tag as the model may write it: its special token, or its text spelled out."""
        spelled = Lit(text.encode())
        return alt(Lit(bytes((self.pseudo[text],))), spelled) if text in self.pseudo else spelled

    def walked(self, token: int) -> bool:
        """Whether the token may appear in fenced output at all (an end token aside)."""
        return 0 <= token < self.vocab_size and bool(self._spellers[1][token])

    @functools.cached_property
    def _spellers(self) -> tuple[frozenset[bytes], np.ndarray, tuple[int, ...]]:
        """The byte strings the walked tokens spell, which ids are walked, and the lengths of
        those strings."""
        walked = np.zeros(self.vocab_size, dtype=bool)
        walked[self.index.order] = True
        known = frozenset(self.index.token_bytes[i] for i in self.index.order)
        return known, walked, tuple(sorted({len(t) for t in known}))

    def verify(self, literal: bytes) -> None:
        """Refuse a literal no sequence of allowed tokens spells (a vocabulary without byte fallback)."""
        reach = np.zeros(len(literal) + 1, dtype=bool)
        reach[0] = True
        known, _, lengths = self._spellers
        for i in range(len(literal)):
            if reach[i]:
                for n in lengths:
                    if i + n <= len(literal) and literal[i:i + n] in known:
                        reach[i + n] = True
        if not reach[-1]:
            raise FenceError(f"the tokenizer cannot produce {literal!r}: no tokens spell it")


@dataclass
class Grammar:
    """A DFA over the vocabulary; shared by every request with the same expression."""

    dfa: Dfa
    vocab: FenceVocab
    _masks: OrderedDict[tuple[int, int], np.ndarray] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def compile(cls, expr: Expr, vocab: FenceVocab) -> "Grammar":
        try:
            grammar = cls(compile_dfa(expr), vocab)
        except ValueError as exc:
            raise FenceError(str(exc)) from None
        for loop in set(grammar._loops) - {None}:  # per vocabulary, once: no first mask waits on one
            vocab.index.loop(*loop)
        return grammar

    @property
    def max_distance(self) -> int:
        """The longest shortest completion from any state: budgets above it need no care."""
        live = self.dfa.distance[:-1]
        return int(live.max()) if len(live) else 0

    def bitmask(self, state: int, budget: int | None = None) -> np.ndarray:
        """The packed int32 row (fence/bitmask.py's layout) of the tokens allowed next from
        `state`. `budget` (tokens left, this one included) keeps only tokens after which the
        rest can still complete, an end token included: bytes bound tokens from above, so
        where no token fits, the tokens that leave the fewest bytes close the structure
        fastest. Rows are computed once per state (and per binding budget), shared read-only."""
        limit = NO_LIMIT if budget is None or budget - 2 >= self.max_distance else budget - 2
        key = (state, limit)
        with self._lock:
            row = self._masks.get(key)
            if row is not None:
                self._masks.move_to_end(key)
                return row
        walked = self._row(state, max(limit, -1))
        row = walked.words
        if walked.closest >= 0 and not self.dfa.accepting[state] and not row.any():
            row = self._row(state, walked.closest).words
        if self.dfa.accepting[state]:
            bits = row.view(np.uint32)
            for t in self.vocab.end_ids:
                bits[t >> 5] |= np.uint32(1 << (t & 31))
        row.setflags(write=False)
        with self._lock:
            self._masks[key] = row
            while len(self._masks) > ROW_CACHE:
                self._masks.popitem(last=False)
        return row

    def prepare(self) -> None:
        """Compute every state's row now (for small grammars, in the background after compile),
        so their requests never wait on a first visit."""
        if len(self.dfa.table) - 1 <= PREPARE_STATES:
            for state in range(len(self.dfa.table) - 1):
                self.bitmask(state)

    def _row(self, state: int, limit: int) -> Row:
        """One native walk: over the trie, or from a loop state (a string's inside, free text)
        the tokens that return to it at once and a walk of the others."""
        return self.vocab.index.row(self.dfa, state, limit, self._loops[state])

    @functools.cached_property
    def _loops(self) -> list[tuple[bytes, bool] | None]:
        """Per state, what loops back to it (the ASCII bytes as 128 flags, and whether every
        well-formed multi-byte character does), for states where enough does."""
        dfa = self.dfa
        states = np.arange(len(dfa.table), dtype=np.int32)
        ascii_loops = dfa.table[:, dfa.classes[:128]] == states[:, None]
        utf8 = np.ones(len(states), dtype=bool)
        for path in self._utf8_paths():
            at = states
            for cls in path:
                at = dfa.table[at, cls]
            utf8 &= at == states
        big = ascii_loops.sum(axis=1) >= LOOP_BYTES
        big[dfa.dead] = False  # everything "returns" to the dead state, and nothing lives there
        return [(ascii_loops[s].astype(np.uint8).tobytes(), bool(utf8[s])) if big[s] else None
                for s in range(len(states))]

    def _utf8_paths(self) -> set[tuple[int, ...]]:
        """The byte-class sequences of every well-formed multi-byte character: the DFA cannot
        tell apart two characters with one sequence."""
        paths = set()
        for ranges in UTF8_RANGES:
            options = [np.unique(self.dfa.classes[lo:hi + 1]).tolist() for lo, hi in ranges]
            paths.update(itertools.product(*options))
        return paths

    def advance(self, state: int, token: int) -> int:
        """The state after `token`; the DFA's dead state for a token the mask did not allow."""
        if token in self.vocab.end_ids:
            return state if self.dfa.accepting[state] else self.dfa.dead
        if not self.vocab.walked(token):
            return self.dfa.dead
        return self.dfa.step(state, self.vocab.index.token_bytes[token])
