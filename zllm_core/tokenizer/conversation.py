"""A conversation's prompt ids: the exact ids of what its model already saw and generated,
then the new text tokenized.

A request finds its conversation (the tokenizer session, by key or by shared text prefix).
When its rendered text begins with one of the conversation's recorded spans (exact_spans.py)
the prompt is that span's ids followed by the rest of the text tokenized on its own: O(new
text), and equal to the previous prompt + the generated tokens whenever the client resent
the previous answer verbatim. Otherwise the incremental tokenizer gives the canonical ids
of the whole text. Every prompt is recorded as a span too, so a generation the client did not
resend verbatim (its reasoning dropped, a tool call re-serialised) still leaves the prompt
before it exact; that fallback is logged as a near-miss.
"""
from __future__ import annotations

import logging
import math
import threading
import uuid
import weakref
from dataclasses import dataclass

import numpy as np

from zllm_core.rope import Rope, Text, flat, suffix_from
from zllm_core.tokenizer.exact_spans import ExactSpans, Span
from zllm_core.tokenizer.id_run import IdRun
from zllm_core.tokenizer.incremental import IncrementalTokenizer
from zllm_core.tokenizer.session_store import Session

log = logging.getLogger("zllm.tokenizer")

# A recorded span counts as missed when the request shares this much of it but not all: less is
# another conversation on the same instructions (as the prefix cache's near-miss log judges).
NEAR_MISS_FRACTION = 0.9
# Session serials restart with the process; this keeps the ids of keyless conversations from
# naming an earlier process's conversation (the SSD tier outlives a restart).
_PROCESS = uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class ConversationIds:
    ids: np.ndarray  # uint32, read-only: the prompt as the model sees it
    conversation: str  # the request's key, else its tokenizer session's: keys the spans, the
    # tokenizer session and the prefix cache's terminal session alike
    session: int  # the tokenizer session holding this conversation's spans
    exact_chars: int  # leading characters whose ids a recorded span gave; 0: all tokenized now
    run: IdRun | None = None  # the conversation's buffer `ids` is a view of (None: the tokenizer's)


@dataclass
class ExactStats:
    hits: int = 0  # prompts that began with a recorded span
    tokens: int = 0  # tokens those spans gave
    near_misses: int = 0  # a longer recorded span differed from the rendered text
    identified: int = 0  # keyless prompts whose session the prompt they extend named


class ConversationTokenizer:
    def __init__(self, tokens: IncrementalTokenizer):
        self.tokens = tokens
        self.stats = ExactStats()
        # A prompt kept as a rope -> its session; entries go with the prompt (renderer states
        # and spans hold it while its conversation can continue).
        self._extended: weakref.WeakKeyDictionary[Rope, int] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def encode(self, text: Text, scope: str = "", key: str | None = None,
               prefix: Text | None = None) -> ConversationIds:
        """`prefix`: a text object `text` is known to start with (the previous prompt it was
        rendered from), which proves recorded spans by identity instead of by comparison; a
        continuing conversation's `text` (a rope over `prefix`) is then never made whole."""
        session = self._session(text, scope, key, prefix)
        spans = session.spans if session is not None else ExactSpans()
        span = spans.longest_prefix_of(text, prefix)
        self._check_near_miss(spans, span, text, prefix)
        run = None
        if span is None:
            ids, session = self.tokens.encode_session(flat(text), scope, key)
        else:
            ids, run = self._extend(span, text)
            self.stats.hits += 1
            self.stats.tokens += len(span.ids)
        self.tokens.add_span(session.id, Span(ids, text, run=run))
        if isinstance(text, Rope):  # the next turn, a rope over this one, finds the session by it
            with self._lock:
                self._extended[text] = session.id
        return ConversationIds(ids, key or f"{_PROCESS}-{session.id}", session.id,
                               len(span) if span is not None else 0, run)

    def _session(self, text: Text, scope: str, key: str | None, prefix: Text | None) -> Session | None:
        """The conversation's tokenizer session: by its key; without one, by the prompt object
        `text` extends (a keyless conversation's identity is its text); else by the longest
        text prefix, for which a rope is made whole."""
        if key is not None:
            session = self.tokens.find(None, scope, key)
        else:
            with self._lock:
                known = self._extended.get(prefix) if isinstance(prefix, Rope) else None
            session = self.tokens.continued(known, scope) if known is not None else None
            self.stats.identified += session is not None
        return session or self.tokens.find(flat(text), scope, key)

    def record(self, prompt: ConversationIds, prompt_text: Text, generated: np.ndarray) -> None:
        """The model answered `prompt` (its text `prompt_text`) with `generated`: the span of
        both, under the text those ids decode to, which a resent history must contain verbatim
        to use them."""
        answer = self.tokens.tokenizer.decode(generated.tolist())
        ids, run = _extended(prompt.run, prompt.ids, generated)
        self.tokens.add_span(prompt.session, Span(ids, prompt_text, answer, run))

    def metrics(self) -> dict[str, int]:
        s = self.stats
        return {"exact_hits": s.hits, "exact_tokens": s.tokens, "exact_near_misses": s.near_misses,
                "exact_identified": s.identified}

    def _extend(self, span: Span, text: Text) -> tuple[np.ndarray, IdRun | None]:
        rest = suffix_from(text, len(span))
        if not rest:
            return span.ids, span.run
        return _extended(span.run, span.ids, self.tokens.encode_alone(rest))

    def _check_near_miss(self, spans: ExactSpans, used: Span | None, text: Text, prefix: Text | None) -> None:
        """Logs a recorded span longer than the one used that the text forks from: the client
        resent an earlier answer differently (and its ids are tokenized anew)."""
        longest = max(spans.spans, key=len, default=None)
        if longest is None or longest is used:
            return
        text = flat(text)
        if longest.extends(text):
            return  # a retry of an earlier prompt
        if prefix is not None and longest.base is prefix:  # text and the span share `prefix`: compare their rest
            at = len(prefix) + _common_prefix(longest.tail, text[len(prefix):])
        else:
            floor = max(len(used) if used is not None else 0, math.ceil(NEAR_MISS_FRACTION * len(longest)))
            if not text.startswith(longest.text[:floor]):
                return  # another branch or another conversation: one compare, no search
            at = _common_prefix(longest.text, text)
        self.stats.near_misses += 1
        log.warning("exact-history near-miss at character %d of a %d-character recorded turn "
                    "(the tail is tokenized anew): request has %r, recorded has %r",
                    at, len(longest), text[max(0, at - 16):at + 16], longest.text[max(0, at - 16):at + 16])


def _common_prefix(a: str, b: str) -> int:
    """Characters a and b share at their start (bisection over memcmp; the near-miss path only)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if b.startswith(a[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _extended(run: IdRun | None, ids: np.ndarray, tail: np.ndarray) -> tuple[np.ndarray, IdRun]:
    """`ids` then `tail`, in the conversation's run (a first extension starts one)."""
    return run.extend(ids, tail) if run is not None else IdRun.of(ids, tail)
