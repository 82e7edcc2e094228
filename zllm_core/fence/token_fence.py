"""One request's fence: where it stands in its grammar, and the tokens it may sample next.

The engine sees only this interface (`allowed`, `advance`) and knows nothing of tools or
schemas. `clone` and `rollback` let a speculative draft be checked position
by position on a copy while the committed state stays put.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from zllm_core.fence.bitmask import unpack
from zllm_core.fence.grammar import Grammar


@dataclass
class TokenFence:
    grammar: Grammar
    max_tokens: int  # the request's output budget: the fence closes its structure within it
    states: list[int] = field(default_factory=list)  # after each advanced token; [] = the start

    @property
    def state(self) -> int:
        return self.states[-1] if self.states else self.grammar.dfa.start

    @property
    def violated(self) -> bool:
        """A token the fence did not allow was advanced (only a caller that ignored the mask)."""
        return self.state == self.grammar.dfa.dead

    def bitmask(self) -> np.ndarray:
        """The packed int32 row of the tokens allowed next (read-only: it may be shared)."""
        return self.grammar.bitmask(self.state, self.max_tokens - len(self.states))

    def allowed(self) -> np.ndarray:
        """The same as bool [vocab_size]."""
        return unpack(self.bitmask(), self.grammar.vocab.vocab_size)

    def advance(self, token: int) -> None:
        self.states.append(self.grammar.advance(self.state, token))

    def clone(self) -> "TokenFence":
        return TokenFence(self.grammar, self.max_tokens, list(self.states))

    def rollback(self, n: int) -> None:
        if n > len(self.states):
            raise ValueError(f"cannot roll back {n} tokens; {len(self.states)} were advanced")
        del self.states[len(self.states) - n:]

    @property
    def complete(self) -> bool:
        """The structure may end here (an end token is allowed)."""
        return bool(self.grammar.dfa.accepting[self.state])
