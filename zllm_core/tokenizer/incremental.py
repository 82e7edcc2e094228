"""Incremental tokenization of continuing conversations, exact by proof.

Agents resend the whole conversation and append a little each call. A session keeps the last
text and its tokens; a call re-tokenizes only from a stable piece boundary in a window of W
characters before the point where the new text diverges from the stored one, and splices:
cost O(appended text + W) plus one memcmp of the prompt against the stored text. The boundary is proven from
the family's pre-tokenizer rules (csrc/incremental.cpp states the proof), and the old and new
token streams must also agree on every token between the window start and the last stable
boundary before the divergence. With no provable boundary in the window W doubles, up to
`max_doublings` times, then the whole text is tokenized. Special tokens are boundaries the
proof accounts for. A sampled shadow verifier re-checks results against the reference.

Result: the tokens of `Tokenizer.encode(text, allowed_special=...)`, always.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from zllm_core import _native
from zllm_core.tokenizer.session_store import Session, SessionStore, TokenRun
from zllm_core.tokenizer.shadow import Mismatch, ShadowVerifier
from zllm_core.tokenizer.tokenizer import SpecialSet, Tokenizer, repair_surrogates

WINDOW_CHARS = 512
MAX_DOUBLINGS = 5
# Appends longer than this go straight to full tokenization. On CPU the repair only ever adds
# a window to the append's own work, so there is no crossover to measure against a CPU full
# path (bench/tokenize_incremental.py --router shows it); None keeps every call incremental.
ROUTE_FULL_AFTER: int | None = None


@dataclass
class IncrementalStats:
    calls: int = 0
    cold: int = 0         # no session: full tokenization
    unchanged: int = 0    # the same text again
    repairs: int = 0      # re-tokenized from a proven boundary (or the text start) and spliced
    whole_window: int = 0  # of which the first window already reached the text start
    accepted_at: list[int] = field(default_factory=lambda: [0] * (MAX_DOUBLINGS + 1))  # the others,
    # by the doubling that found a boundary
    fallbacks: int = 0     # no boundary after every doubling: full tokenization
    routed_full: int = 0   # append over the router threshold
    disagreements: int = 0  # old and new tokens differed where the proof says they agree

    @property
    def first_window_rate(self) -> float:
        """Of the splices whose first window did not cover the whole text, the fraction the
        first window proved (TokTier's first-window acceptance)."""
        tried = sum(self.accepted_at) + self.fallbacks
        return self.accepted_at[0] / tried if tried else 1.0


@dataclass(frozen=True)
class _Splice:
    start: int   # byte offset of the proven boundary the window starts at
    last: int    # the last proven boundary before the divergence (agreement up to it), or -1
    attempt: int


class IncrementalTokenizer:
    def __init__(self, tokenizer: Tokenizer, budget_bytes: int = 1 << 30, *,
                 allowed_special: SpecialSet = "all", window: int = WINDOW_CHARS,
                 max_doublings: int = MAX_DOUBLINGS, route_full_after: int | None = ROUTE_FULL_AFTER,
                 shadow_rate: float = 0.05, shadow_seed: int | None = None,
                 reference: Callable[[str], Sequence[int]] | None = None):
        self.tokenizer = tokenizer
        self.window, self.max_doublings, self.route_full_after = window, max_doublings, route_full_after
        self.store = SessionStore(budget_bytes)
        self.stats = IncrementalStats()
        self._allowed = allowed_special
        self._core = tokenizer.native
        self._grammar = tokenizer.rules[0].to_native()
        self._policy = tokenizer.special_policy(allowed_special)
        self._longest_special = max((len(s) for s in tokenizer.special_tokens), default=0)
        self._lock = threading.Lock()
        self.shadow = ShadowVerifier(reference or self._reference, self._invalidate, tokenizer.decode,
                                     rate=shadow_rate, seed=shadow_seed)

    def encode(self, text: str, scope: str = "", key: str | None = None, save_as: str | None = None,
               copy: bool = True) -> np.ndarray:
        """Token ids (uint32) of `text`, continuing the session found by `key` (else by the
        longest shared prefix in `scope`); the session is then also found by `save_as`.
        copy=False returns a read-only view of the session's tokens instead of a copy (O(n)):
        valid until the session's next call, for a caller that consumes it at once."""
        text = self.tokenizer.normalize(text)  # NFC is not prefix-stable: compare normal forms
        with self._lock:
            self.stats.calls += 1
            session = self.store.find(scope, text, key)
            if session is None:
                session = self._cold(scope, text)
            else:
                session = self._continue(session, text, forked=key is None)
            self.store.remember(session, save_as or key)
            self.store.touch(session)
            ids = session.tokens.ids
            ids = ids.copy() if copy else ids.view()
            self.shadow.sample(session.id, text, ids)  # copies what it samples
        if not copy:
            ids.flags.writeable = False
        return ids

    def metrics(self) -> dict[str, float]:
        """Counters for the server's metrics endpoint."""
        s, st, sh = self.stats, self.store.stats, self.shadow.stats
        return {
            "calls": s.calls, "cold": s.cold, "unchanged": s.unchanged, "repairs": s.repairs,
            **{f"accepted_at_{k}": n for k, n in enumerate(s.accepted_at)},
            "whole_window": s.whole_window, "fallbacks": s.fallbacks, "routed_full": s.routed_full,
            "disagreements": s.disagreements, "first_window_rate": s.first_window_rate,
            "sessions": st.sessions, "session_bytes": st.bytes, "evictions": st.evictions,
            "shadow_checked": sh.checked, "shadow_mismatches": sh.mismatches, "shadow_skipped": sh.skipped,
        }

    # ---- paths
    def _cold(self, scope: str, text: str) -> Session:
        self.stats.cold += 1
        text = self._repaired(text, 0)
        ids, ends = _native.encode_tail(self._core, self._policy, text, 0)
        session = Session(scope, text, TokenRun(ids, ends))
        self.store.add(session, None)
        return session

    def _continue(self, session: Session, text: str, forked: bool) -> Session:
        diverged, old_len, new_len = _native.common_prefix(session.text, text)
        repaired = self._repaired(text, diverged)
        if repaired is not text:
            text = repaired
            diverged, old_len, new_len = _native.common_prefix(session.text, text)
        if diverged == old_len == new_len:
            self.stats.unchanged += 1
            return session
        forked = forked and diverged < old_len  # another conversation may still continue the old text
        if self.route_full_after is not None and new_len - diverged > self.route_full_after:
            self.stats.routed_full += 1
            return self._restart(session, text, forked)
        splice = self._find_splice(session.text, text, diverged)
        if splice is None:
            self.stats.fallbacks += 1
            return self._restart(session, text, forked)
        ids, ends = _native.encode_tail(self._core, self._policy, text[splice.start:], splice.start)
        kept = self._kept_tokens(session.tokens, splice, ids, ends)
        if kept is None:
            self.stats.disagreements += 1
            self.store.drop(session.id)
            return self._cold(session.scope, text)
        self.stats.repairs += 1
        if splice.start == 0 and splice.attempt == 0:
            self.stats.whole_window += 1
        else:
            self.stats.accepted_at[splice.attempt] += 1
        if forked:
            session = self._fork(session, kept)
        session.tokens.splice(kept, ids, ends)
        self.store.replace_text(session, text, diverged)
        return session

    def _repaired(self, text: str, clean_upto: int) -> str:
        """Session texts hold no surrogates (tiktoken repairs them): a text with one in
        text[clean_upto:] is repaired as a whole, rarely."""
        if _native.has_surrogates(text, clean_upto):
            return repair_surrogates(text)
        return text

    def _restart(self, session: Session, text: str, forked: bool) -> Session:
        """Full tokenization, kept in `session` (or a new one beside it for a fork)."""
        if forked:
            return self._cold(session.scope, text)
        ids, ends = _native.encode_tail(self._core, self._policy, text, 0)
        session.tokens = TokenRun(ids, ends)
        self.store.replace_text(session, text, 0)
        return session

    def _fork(self, session: Session, kept: int) -> Session:
        fork = Session(session.scope, session.text, session.tokens.copy(kept))
        self.store.add(fork, None)
        return fork

    # ---- the splice
    def _find_splice(self, old: str, new: str, diverged: int) -> _Splice | None:
        width = self.window
        for attempt in range(self.max_doublings + 1):
            lo = diverged - width
            if lo <= 0:
                return _Splice(0, -1, attempt)
            # segments with room for a special token around the proof's reads
            base = max(0, lo - 2 * self._longest_special)
            first, last = _native.stable_boundaries(self._core, self._grammar, self._policy,
                                                    old[base:diverged + self._longest_special + 1],
                                                    new[base:], lo - base, diverged - base)
            if first >= 0:
                return _Splice(base + first, base + last, attempt)
            width *= 2
        return None

    @staticmethod
    def _kept_tokens(tokens: TokenRun, splice: _Splice, ids: np.ndarray, ends: np.ndarray) -> int | None:
        """How many old tokens precede the splice, or None when the old tokens do not end at
        the proven boundaries or disagree with the new ones between them."""
        old_ends = tokens.ends
        kept = int(np.searchsorted(old_ends, np.uint32(splice.start), side="right"))
        if splice.start and (kept == 0 or old_ends[kept - 1] != splice.start):
            return None
        if splice.last <= splice.start:
            return kept
        upto = int(np.searchsorted(old_ends, np.uint32(splice.last), side="right"))
        m = upto - kept
        if old_ends[upto - 1] != splice.last or m > len(ids) or (m and ends[m - 1] != splice.last):
            return None
        same = np.array_equal(tokens.ids[kept:upto], ids[:m]) and np.array_equal(old_ends[kept:upto], ends[:m])
        return kept if same else None

    # ---- shadow
    def _reference(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, allowed_special=self._allowed)

    def _invalidate(self, mismatch: Mismatch) -> None:
        with self._lock:
            self.store.drop(mismatch.session_id)
