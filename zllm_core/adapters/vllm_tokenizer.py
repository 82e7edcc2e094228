"""The incremental tokenizer in front of another server, in the call shape vLLM-style servers
give their tokenizer: `encode(prompt, session_id) -> ids`.

A coding agent resends its whole conversation on every call. Given the conversation's id, each
call re-tokenizes only what changed since that session's last call (IncrementalTokenizer: a
proven piece boundary, then a splice), and the ids are by contract those of
`Tokenizer.encode(prompt)` on the whole prompt; a sampled shadow verifier re-checks that in
the background and drops a session that ever disagrees.
"""
from __future__ import annotations

from collections.abc import Sequence

from zllm_core.tokenizer.incremental import IncrementalTokenizer
from zllm_core.tokenizer.tokenizer import SpecialSet, Tokenizer


class TokenizerSession:
    """Sessions of one tokenizer, found by the caller's session id (or by shared prefix)."""

    def __init__(self, tokenizer: Tokenizer, *, budget_bytes: int = 1 << 30,
                 allowed_special: SpecialSet = "all", shadow_rate: float = 0.05):
        """`budget_bytes` bounds what the sessions hold (least recently used go first);
        `allowed_special` is the special tokens a prompt's text may spell (a rendered chat
        template spells its own); `shadow_rate` is the fraction of calls the verifier re-checks."""
        self.tokenizer = tokenizer
        self.sessions = IncrementalTokenizer(tokenizer, budget_bytes, allowed_special=allowed_special,
                                             shadow_rate=shadow_rate)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def encode(self, prompt: str, session_id: str | None = None) -> list[int]:
        """The ids of `prompt`, continuing `session_id`'s session (without one: the stored
        session sharing the longest prefix)."""
        return self.sessions.encode(prompt, key=session_id).tolist()

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)

    def metrics(self) -> dict[str, float]:
        """Calls by path (cold, unchanged, repaired, fallbacks), sessions held and the shadow
        verifier's checks and mismatches."""
        return self.sessions.metrics()
