"""Token-exact history: the ids a conversation's model actually saw and generated.

Re-tokenizing an answer the model generated need not give back its ids: BPE merges it
canonically ("hel" + "lo" becomes "hello"), a character the model wrote as two byte tokens
becomes one. The next prompt would then differ from the previous prompt + the generated
tokens a few tokens before the previous turn's end, and the prefix cache would miss from
there. So a conversation keeps its last few spans -- a text and the exact ids that stood for
it -- and a prompt whose rendered text begins with a span's text takes that span's ids.
The text decides, never the ids: a span is used only when the rendered text starts with it
verbatim.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

KEPT_SPANS = 4  # a prompt and its generation per turn: a conversation's last two turns


@dataclass(frozen=True)
class Span:
    text: str  # as rendered (before the tokenizer's normalization)
    ids: np.ndarray  # uint32, read-only: what the model saw for `text`

    @property
    def nbytes(self) -> int:
        return sys.getsizeof(self.text) + self.ids.nbytes


@dataclass(frozen=True)
class ExactSpans:
    """A conversation's recent spans, oldest first; immutable, so a reader on another thread
    never sees one half-updated."""

    spans: tuple[Span, ...] = ()

    def with_span(self, span: Span, kept: int = KEPT_SPANS) -> "ExactSpans":
        older = tuple(s for s in self.spans if s.text != span.text)  # a resent prompt replaces itself
        return ExactSpans((*older, span)[-kept:])

    def longest_prefix_of(self, text: str) -> Span | None:
        """The longest span `text` begins with verbatim (str.startswith: a memcmp a span tried;
        a continuing conversation matches the first one tried, its last generation)."""
        for span in sorted(self.spans, key=lambda s: len(s.text), reverse=True):
            if text.startswith(span.text):
                return span
        return None

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.spans)
