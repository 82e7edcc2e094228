"""Incremental tokenization of continuing conversations, exact by proof.

Agents resend the whole conversation and append a little each call. A session keeps the last
text and its tokens; a call re-tokenizes only from a stable piece boundary in a window of W
characters before the point where the new text diverges from the stored one, and splices:
cost O(appended text + W) plus one vectorised pass comparing the prompt with the stored text
(kept compact, csrc/session_text.h). A long prompt's last 16K characters are compared first and
the repair starts from what they show while a helper thread proves the rest equal
(csrc/scan_helper.h); nothing changes until that proof is in. NFC,
for tokenizers that ask for it, is applied from the last ASCII character before the
divergence (Tokenizer.normalize). The boundary is proven from
the family's pre-tokenizer rules (csrc/incremental.cpp states the proof), and the old and new
token streams must also agree on every token between the window start and the last stable
boundary before the divergence. With no provable boundary in the window W doubles, up to
`max_doublings` times, then the whole text is tokenized. Special tokens are boundaries the
proof accounts for. A sampled shadow verifier re-checks results against the reference.
Whole-text tokenization (a cold session, a fallback) runs on the tokenizer's GPU path where it
takes the text, and an append too large for a cheap repair goes there whole when that is
faster (device_route.py); the session adopts the result.

Result: the tokens of `Tokenizer.encode(text, allowed_special=...)`, always.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from zllm_core import _native
from zllm_core.conversation_clock import Held
from zllm_core.tokenizer.exact_spans import Span
from zllm_core.tokenizer.session_store import Session, SessionStore
from zllm_core.tokenizer.shadow import Mismatch, ShadowVerifier
from zllm_core.tokenizer.tokenizer import SpecialSet, Tokenizer, repair_surrogates

WINDOW_CHARS = 512
MAX_DOUBLINGS = 5
# Appends longer than this go straight to full tokenization. On CPU the repair only ever adds
# a window to the append's own work, so there is no crossover to measure against a CPU full
# path (bench/tokenize_incremental.py --router shows it); None leaves the choice to the
# tokenizer's GPU route (a large append goes whole to the device when that is faster).
ROUTE_FULL_AFTER: int | None = None
FORK_TAIL_FRACTION = 16  # a call forks its session when it discards more than this part
_NO_BOUNDARY, _DISAGREE, _MOVED = -1, -2, -3  # outcomes of _native.repair (csrc/incremental.cpp)


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
    rekeyed: int = 0  # keyed calls continued the session sharing more text than the key's
    moved: int = 0  # a long prompt's tail hid an earlier divergence (the work from it was redone)

    @property
    def first_window_rate(self) -> float:
        """Of the splices whose first window did not cover the whole text, the fraction the
        first window proved (TokTier's first-window acceptance)."""
        tried = sum(self.accepted_at) + self.fallbacks
        return self.accepted_at[0] / tried if tried else 1.0


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
        self._lock = threading.Lock()
        self.shadow = ShadowVerifier(reference or self._reference, self._invalidate, tokenizer.decode,
                                     rate=shadow_rate, seed=shadow_seed)

    def encode(self, text: str, scope: str = "", key: str | None = None, save_as: str | None = None
               ) -> np.ndarray:
        """Token ids (uint32) of `text`, continuing the session found by `key` (else by the
        longest shared prefix in `scope`); the session is then also found by `save_as`. The
        array is a read-only view of the session's tokens that later calls never change
        (csrc/token_run.h), so returning it copies nothing."""
        return self.encode_session(text, scope, key, save_as)[0]

    def encode_session(self, text: str, scope: str = "", key: str | None = None,
                       save_as: str | None = None) -> tuple[np.ndarray, Session]:
        """`encode`'s ids and the session the call continued (or began)."""
        with self._lock:
            self.stats.calls += 1
            session = self.store.find(scope, text, key)
            if session is None:
                session = self._cold(scope, self.tokenizer.normalize(text))
            else:
                session = self._continue(session, text, keyless=key is None)
            self.store.remember(session, save_as or key)
            self.store.touch(session)
            ids = session.tokens.ids
            self.shadow.sample(session.id, text, ids)
        return ids, session

    def encode_alone(self, text: str) -> np.ndarray:
        """Ids of `text` tokenized on its own (no session), under this tokenizer's special policy."""
        return self.tokenizer.encode_to_numpy(self.tokenizer.normalize(text), allowed_special=self._allowed)

    def find(self, text: str | None, scope: str = "", key: str | None = None) -> Session | None:
        """The session `encode` would continue (by `key` alone if `text` is None), marked
        recently used; nothing is tokenized."""
        with self._lock:
            session = self.store.find(scope, text, key)
            if session is not None:
                self.store.remember(session, key)
                self.store.touch(session)
            return session

    def continued(self, session_id: int, scope: str) -> Session | None:
        """Session `session_id` if still held in `scope`, marked recently used: for a caller
        that knows by identity which conversation a text continues."""
        with self._lock:
            session = self.store.get(session_id)
            if session is None or session.scope != scope:
                return None
            self.store.touch(session)
            return session

    def add_span(self, session_id: int, span: Span) -> None:
        """Records `span` with its session, if the session is still held (exact_spans.py)."""
        with self._lock:
            session = self.store.get(session_id)
            if session is not None:
                session.spans = session.spans.with_span(span)
                self.store.touch(session)  # its bytes grew: the budget may evict

    def held(self, session_id: int) -> Held | None:
        """The session (text, tokens, exact spans) as the conversation clock accounts it."""
        with self._lock:
            session = self.store.get(session_id)
            return Held("tokenizer", session_id, session.nbytes,
                        lambda: self.forget(session_id)) if session is not None else None

    def forget(self, session_id: int) -> None:
        """Drops the session, if still held."""
        with self._lock:
            self.store.drop(session_id)

    def metrics(self) -> dict[str, float]:
        """Counters for the server's metrics endpoint."""
        s, st, sh = self.stats, self.store.stats, self.shadow.stats
        return {
            "calls": s.calls, "cold": s.cold, "unchanged": s.unchanged, "repairs": s.repairs,
            **{f"accepted_at_{k}": n for k, n in enumerate(s.accepted_at)},
            "whole_window": s.whole_window, "fallbacks": s.fallbacks, "routed_full": s.routed_full,
            "disagreements": s.disagreements, "rekeyed": s.rekeyed, "moved": s.moved, "first_window_rate": s.first_window_rate,
            "sessions": st.sessions, "session_bytes": st.bytes, "evictions": st.evictions,
            "shadow_checked": sh.checked, "shadow_mismatches": sh.mismatches, "shadow_skipped": sh.skipped,
        }

    # ---- paths
    def _cold(self, scope: str, text: str, routed: bool = False) -> Session:
        self.stats.cold += 1
        text = self._repaired(text, 0)
        session = Session(scope, _native.SessionText(text), self._full(text, routed))
        self.store.add(session, None, text)
        return session

    def _continue(self, session: Session, text: str, keyless: bool) -> Session:
        divergence = session.text.compare(text)  # provisional while the helper thread proves the head
        while True:
            continued = self._continue_from(session, text, divergence, keyless)
            if continued is not None:
                return continued
            self.stats.moved += 1  # the proven divergence lies earlier: again from there

    def _continue_from(self, session: Session, text: str, divergence: _native.Divergence,
                       keyless: bool) -> Session | None:
        """The call, from the divergence as known so far; None when it was provisional and
        turned out wrong, before anything changed."""
        text, diverged, pending = self._shared_prefix(session, text, divergence)
        old_len, new_len = len(session.text), len(text)
        routed = self._routes_full(new_len, new_len - diverged)
        # A call that discards much of its session decides from the proven divergence: it forks
        # the session, and a keyed one first looks for a session sharing more. The old text
        # may be another conversation's (keyless, or a key naming a user rather than a
        # conversation, as Anthropic's metadata.user_id does), which a fork keeps intact. A
        # fork copies and re-indexes the whole session, while continuing in place only makes
        # such a sibling re-tokenize the discarded tail if it comes back; so fork only for a
        # long tail (re-tokenizing 1/16 of a text costs about what copying it does). The common
        # case, a template re-rendering the last turn, discards a short tail.
        discards = old_len - diverged > old_len // FORK_TAIL_FRACTION
        if (diverged == old_len == new_len or routed or discards) and pending is not None \
                and pending.verified() != diverged:
            return None
        if diverged == old_len == new_len:
            self.stats.unchanged += 1
            return session
        if discards and not keyless:
            other = self._sharing_more(session, text, diverged)
            if other is not None:
                return self._continue(other, text, keyless=True)
        if routed:
            self.stats.routed_full += 1
            return self._restart(session, text, discards, routed=True)
        return self._repair(session, text, diverged, discards, pending)

    def _sharing_more(self, session: Session, text: str, diverged: int) -> Session | None:
        """The session of the scope sharing the longest prefix with text, if it shares more
        than `session` (found by key) does."""
        other = self.store.longest_prefix(session.scope, text)
        if other is None or other is session or other.text.common_prefix(text) <= diverged:
            return None
        self.stats.rekeyed += 1
        return other

    def _shared_prefix(self, session: Session, text: str, divergence: _native.Divergence
                       ) -> tuple[str, int, _native.Divergence | None]:
        """(text as tokenized, code points it shares with the session's text, the divergence if
        that count is still provisional). The session's text is normalized and free of
        surrogates, so is the prefix text shares with it."""
        diverged = divergence.at
        normal = self.tokenizer.normalize(text, diverged)
        if normal is text and not _native.has_surrogates(text, diverged):
            return text, diverged, divergence if divergence.pending else None
        diverged = divergence.verified()  # rarely here: fix the text from the proven divergence
        normal = self.tokenizer.normalize(text, diverged)
        fixed = self._repaired(normal, diverged if normal is text else 0)
        return fixed, diverged if fixed is text else session.text.common_prefix(fixed), None

    def _repair(self, session: Session, text: str, diverged: int, forked: bool,
                pending: _native.Divergence | None) -> Session | None:
        outcome, attempt, start, fork_tokens = _native.repair(
            self._core, self._grammar, self._policy, session.text, text, diverged,
            session.tokens, self.window, self.max_doublings, forked, pending)
        if outcome == _MOVED:
            return None
        if outcome == _NO_BOUNDARY:
            self.stats.fallbacks += 1
            return self._restart(session, text, forked)
        if outcome == _DISAGREE:
            self.stats.disagreements += 1
            self.store.drop(session.id)
            return self._cold(session.scope, text)
        self.stats.repairs += 1
        if start == 0 and attempt == 0:
            self.stats.whole_window += 1
        else:
            self.stats.accepted_at[attempt] += 1
        if forked:  # the repair left the session's tokens as they were
            fork = Session(session.scope, _native.SessionText(text), fork_tokens)
            self.store.add(fork, None, text, forked_at=diverged)
            return fork
        self.store.reindex(session, text, diverged)  # the repair spliced its tokens and text
        return session

    def _repaired(self, text: str, clean_upto: int) -> str:
        """Session texts hold no surrogates (tiktoken repairs them): a text with one in
        text[clean_upto:] is repaired as a whole, rarely."""
        if _native.has_surrogates(text, clean_upto):
            return repair_surrogates(text)
        return text

    def _restart(self, session: Session, text: str, forked: bool, routed: bool = False) -> Session:
        """Full tokenization, kept in `session` (or a new one beside it for a fork)."""
        if forked:
            return self._cold(session.scope, text, routed)
        session.tokens = self._full(text, routed)
        session.text.replace_from(text, 0)
        self.store.reindex(session, text, 0)
        return session

    def _routes_full(self, chars: int, appended: int) -> bool:
        """Whether an append goes to full tokenization: over `route_full_after` when set, else
        when the tokenizer's GPU route does the whole text faster than a repair."""
        if self.route_full_after is not None:
            return appended > self.route_full_after
        self.tokenizer.device_route(chars)  # looks for a device on first use
        route = self.tokenizer.device
        return route is not None and route.prefers_full(chars, appended, self.window)

    def _full(self, text: str, routed: bool) -> _native.TokenRun:
        """The whole text's tokens: on the GPU if its route takes the text (or `routed` sent an
        append there), else on the CPU."""
        route = self.tokenizer.device if routed else self.tokenizer.device_route(len(text))
        run = route.encode_run(text, self._policy) if route is not None else None
        return run if run is not None else _native.encode_tail(self._core, self._policy, text)

    # ---- shadow
    def _reference(self, text: str) -> list[int]:
        return self.tokenizer.cpu_encode(text, self._policy)

    def _invalidate(self, mismatch: Mismatch) -> None:
        with self._lock:
            self.store.drop(mismatch.session_id)
