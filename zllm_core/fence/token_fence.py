"""One request's fence: where it stands in its grammar, and the tokens it may sample next.

The engine sees only this interface (`allowed`, `advance`) and knows nothing of tools or
schemas. `clone` and `rollback` let a speculative draft be checked position
by position on a copy while the committed state stays put.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from zllm_core.fence.bitmask import bitmask_width, pack_allowed, unpack
from zllm_core.fence.grammar import Grammar
from zllm_core.fence.guard import GenerationGuard


@dataclass
class TokenFence:
    """A grammar fence, a loop guard, or both, composed; the grammar wins any conflict."""

    grammar: Grammar | None
    max_tokens: int  # the request's output budget: the fence closes its structure within it
    guard: GenerationGuard | None = None
    vocab_size: int = 0  # without a grammar: the tokenizer's (for the guard's rows)
    end_ids: tuple[int, ...] = ()
    states: list[int] = field(default_factory=list)  # after each advanced token; [] = the start

    def __post_init__(self) -> None:
        if self.grammar is not None:
            self.vocab_size, self.end_ids = self.grammar.vocab.vocab_size, self.grammar.vocab.end_ids

    @property
    def state(self) -> int:
        if self.grammar is None:
            return 0
        return self.states[-1] if self.states else self.grammar.dfa.start

    @property
    def violated(self) -> bool:
        """A token the fence did not allow was advanced (only a caller that ignored the mask)."""
        return self.grammar is not None and self.state == self.grammar.dfa.dead

    @property
    def complete(self) -> bool:
        """The structure may end here (an end token is allowed)."""
        return self.grammar is None or bool(self.grammar.dfa.accepting[self.state])

    def bitmask(self) -> np.ndarray | None:
        """The packed int32 row of the tokens allowed next (read-only: it may be shared), or
        None when nothing is constrained this step."""
        row = None if self.grammar is None else self.grammar.bitmask(
            self.state, self.max_tokens - len(self.states))
        guard = self.guard
        if guard is None or (guard.banned is None and not guard.exhausted):
            return row
        if guard.exhausted and self.complete:
            return pack_allowed(np.isin(np.arange(self.vocab_size), self.end_ids))
        if guard.banned is None:
            return row
        narrowed = np.array(row if row is not None else np.full(bitmask_width(self.vocab_size), -1, np.int32))
        word, bit = divmod(guard.banned, 32)
        narrowed[word] &= np.int32(~(1 << bit) if bit < 31 else 0x7FFFFFFF)
        return narrowed if narrowed.any() else row  # never empty what the grammar allows

    def allowed(self) -> np.ndarray:
        """The same as bool [vocab_size] (everything, when nothing is constrained)."""
        row = self.bitmask()
        return np.ones(self.vocab_size, dtype=bool) if row is None else unpack(row, self.vocab_size)

    def advance(self, token: int) -> None:
        if self.grammar is not None:
            self.states.append(self.grammar.advance(self.state, token))
        else:
            self.states.append(0)
        if self.guard is not None:
            self.guard.observe(token)

    def clone(self) -> "TokenFence":
        guard = None if self.guard is None else replace(self.guard, tail=list(self.guard.tail))
        return replace(self, guard=guard, states=list(self.states))

    def rollback(self, n: int) -> None:
        """Forget the last n tokens (a rejected draft). The guard is not rolled back: drafts
        are checked on a clone, whose guard is thrown away with it."""
        if n > len(self.states):
            raise ValueError(f"cannot roll back {n} tokens; {len(self.states)} were advanced")
        del self.states[len(self.states) - n:]
