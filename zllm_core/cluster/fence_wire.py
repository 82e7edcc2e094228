"""A request's token fence across the process boundary.

The ingress compiles the fence (a schema it cannot enforce is the client's 400 there, before
anything reaches a replica); the replica's engine runs it. A TokenFence holds its tokenizer's
vocabulary index and locks, so it travels as its DFA, budget and guard settings and is rebuilt
over the replica's own FenceVocab: the same tokenizer and tags give the same rows. Grammars are
kept per DFA, so the requests of one tool set share their rows as they do in one process.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import xxhash

from zllm_core.fence.automaton import Dfa
from zllm_core.fence.factory import GRAMMAR_CACHE
from zllm_core.fence.grammar import FenceVocab, Grammar
from zllm_core.fence.guard import GenerationGuard, GuardConfig
from zllm_core.fence.token_fence import TokenFence


@dataclass(frozen=True)
class FenceWire:
    dfa: Optional[Dfa]
    max_tokens: int
    guard: Optional[GuardConfig]
    vocab_size: int
    end_ids: tuple[int, ...]
    tags: tuple[str, ...]  # the dialect's tag tokens, as the ingress's FenceVocab maps them

    @classmethod
    def of(cls, fence: TokenFence, tags: Sequence[str]) -> "FenceWire":
        if fence.states:
            raise ValueError("a fence travels before its first token")
        return cls(fence.grammar.dfa if fence.grammar is not None else None, fence.max_tokens,
                   fence.guard.config if fence.guard is not None else None, fence.vocab_size,
                   fence.end_ids, tuple(tags))


class FenceBuilder:
    """Rebuilds fences on the replica over a FenceVocab of its own tokenizer, made on first use."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self._vocabs: dict[tuple[tuple[str, ...], tuple[int, ...]], FenceVocab] = {}
        self._grammars: OrderedDict[bytes, Grammar] = OrderedDict()
        self._lock = threading.Lock()

    def build(self, wire: FenceWire) -> TokenFence:
        grammar = self._grammar(wire) if wire.dfa is not None else None
        guard = GenerationGuard(wire.guard) if wire.guard is not None else None
        return TokenFence(grammar, wire.max_tokens, guard, wire.vocab_size, wire.end_ids)

    def _vocab(self, wire: FenceWire) -> FenceVocab:
        key = (wire.tags, wire.end_ids)
        if key not in self._vocabs:
            self._vocabs[key] = FenceVocab.for_tokenizer(self._tokenizer, wire.end_ids, wire.tags)
        return self._vocabs[key]

    def _grammar(self, wire: FenceWire) -> Grammar:
        dfa = wire.dfa
        h = xxhash.xxh3_128(dfa.table.tobytes())
        for part in (dfa.classes, dfa.accepting, dfa.distance):
            h.update(part.tobytes())
        key = h.digest() + repr((dfa.start, wire.tags, wire.end_ids)).encode()
        with self._lock:
            grammar = self._grammars.get(key)
            if grammar is not None:
                self._grammars.move_to_end(key)
                return grammar
            grammar = self._grammars[key] = Grammar(dfa, self._vocab(wire))
            while len(self._grammars) > GRAMMAR_CACHE:
                self._grammars.popitem(last=False)
        threading.Thread(target=grammar.prepare, daemon=True, name="zllm-fence-prepare").start()
        return grammar
