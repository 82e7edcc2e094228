"""Token-exact history: the ids a conversation's model actually saw and generated.

Re-tokenizing an answer the model generated need not give back its ids: BPE merges it
canonically ("hel" + "lo" becomes "hello"), a character the model wrote as two byte tokens
becomes one. The next prompt would then differ from the previous prompt + the generated
tokens a few tokens before the previous turn's end, and the prefix cache would miss from
there. So a conversation keeps its last few spans -- a text and the exact ids that stood for
it -- and a prompt whose rendered text begins with a span's text takes that span's ids.
The text decides, never the ids: a span is used only when the rendered text starts with it
verbatim. That is proven by comparing the texts, or, when the caller built the text by
extending a string object a span was recorded with (`prefix`, the renderer's previous prompt),
by identity: then only the part after that object is compared, so a resent megabyte of
history costs nothing here.
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
    base: str | None = None  # when set, text == base + tail: a prompt and what was generated after it
    tail: str = ""

    def begins(self, text: str, prefix: str | None) -> bool:
        """Whether `text` starts with this span's text; `prefix`, if given, is a string object
        `text` is known to start with."""
        if prefix is not None:
            if self.text is prefix:
                return True
            if self.base is prefix:
                return text.startswith(self.tail, len(prefix))
        return text.startswith(self.text)

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

    def longest_prefix_of(self, text: str, prefix: str | None = None) -> Span | None:
        """The longest span `text` begins with verbatim (a continuing conversation matches the
        first one tried, its last generation); `prefix` as in `Span.begins`."""
        for span in sorted(self.spans, key=lambda s: len(s.text), reverse=True):
            if span.begins(text, prefix):
                return span
        return None

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.spans)
