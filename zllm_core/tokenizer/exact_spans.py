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

from dataclasses import dataclass

import numpy as np

from zllm_core.rope import Text, flat, nbytes, startswith_at
from zllm_core.tokenizer.id_run import IdRun

KEPT_SPANS = 4  # a prompt and its generation per turn: a conversation's last two turns


@dataclass(frozen=True)
class Span:
    """A text and the exact ids that stood for it. The text is `base` then `tail`: a prompt
    alone, or a prompt (the very string object recorded for it) and what was generated after
    it, kept apart so a megabyte of history is never copied to record an answer."""

    ids: np.ndarray  # uint32, read-only: what the model saw for the text
    base: Text  # as rendered (before the tokenizer's normalization)
    tail: str = ""
    run: IdRun | None = None  # the buffer `ids` is a view of, which a longer span extends

    def __len__(self) -> int:
        return len(self.base) + len(self.tail)

    @property
    def text(self) -> str:
        return flat(self.base) + self.tail  # diagnostics only: a copy

    def begins(self, text: Text, prefix: Text | None = None) -> bool:
        """Whether `text` starts with this span's text; `prefix`, if given, is a text object
        `text` is known to start with."""
        if self.base is not prefix:
            text = flat(text)
            return text.startswith(flat(self.base)) and text.startswith(self.tail, len(self.base))
        return startswith_at(text, self.tail, len(self.base))

    def extends(self, text: str) -> bool:
        """Whether this span's text starts with `text`."""
        base = flat(self.base)
        if len(text) <= len(base):
            return base.startswith(text)
        return text.startswith(base) and self.tail.startswith(text[len(base):])

    def same(self, other: "Span") -> bool:
        """Whether the two texts are equal, compared piece by piece."""
        if len(self) != len(other):
            return False
        a, b = (self, other) if len(self.base) <= len(other.base) else (other, self)
        k = len(b.base) - len(a.base)  # b's base is a's base and then a's tail's first k
        a_base, b_base = flat(a.base), flat(b.base)
        return b_base.startswith(a_base) and b_base.startswith(a.tail[:k], len(a_base)) and a.tail.startswith(b.tail, k)


@dataclass(frozen=True)
class ExactSpans:
    """A conversation's recent spans, oldest first; immutable, so a reader on another thread
    never sees one half-updated."""

    spans: tuple[Span, ...] = ()

    def with_span(self, span: Span, kept: int = KEPT_SPANS) -> "ExactSpans":
        older = tuple(s for s in self.spans if not s.same(span))  # a resent prompt replaces itself
        return ExactSpans((*older, span)[-kept:])

    def longest_prefix_of(self, text: Text, prefix: Text | None = None) -> Span | None:
        """The longest span `text` begins with verbatim (a continuing conversation matches the
        first one tried, its last generation); `prefix` as in `Span.begins`."""
        for span in sorted(self.spans, key=len, reverse=True):
            if len(span) > len(text):
                continue
            if span.base is not prefix:
                text = flat(text)  # made whole once, for this and the shorter spans
            if span.begins(text, prefix):
                return span
        return None

    @property
    def nbytes(self) -> int:
        """Each text and id buffer once: a conversation's spans share them (a span's base is
        the previous prompt's text object, its ids a view of the conversation's run)."""
        held = (s.run if s.run is not None else s.ids for s in self.spans)
        ids = {id(h): h.nbytes for h in held}
        return nbytes(t for s in self.spans for t in (s.base, s.tail)) + sum(ids.values())
