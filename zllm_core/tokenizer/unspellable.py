"""Characters a byte-level vocabulary cannot spell, which tokenization drops.

Some vocabularies have no single-byte token for a few bytes (SmolLM2: the controls \\x04,
\\x06, \\x13, \\x14, \\x16, \\x1d and the UTF-8 lead bytes 0xF1-0xF4).  Hugging Face's BPE
without an unk token drops such a byte.  Dropping it before tokenization instead keeps the
invariant the rest of the tokenizer relies on, that the tokens spell the (normalised) text
exactly: for a missing ASCII byte the result is the same; for a missing lead byte the whole
character goes (Hugging Face keeps the tokens of its continuation bytes), which affects only
code points from U+40000 on, planes 4-16.  A missing continuation byte would touch most of
Unicode and is refused.
"""
from __future__ import annotations

import re

from zllm_core.tokenizer.rules import UnsupportedTokenizer

_NEVER_IN_UTF8 = {0xC0, 0xC1, *range(0xF5, 0x100)}


def missing_bytes(tokens: list[bytes]) -> list[int]:
    have = {t[0] for t in tokens if len(t) == 1}
    return [b for b in range(256) if b not in have]


def unspellable_pattern(tokens: list[bytes]) -> re.Pattern[str] | None:
    """A regex matching every character whose UTF-8 form holds a byte with no token; None if none."""
    ranges = []
    for b in missing_bytes(tokens):
        if b in _NEVER_IN_UTF8:
            continue
        if 0x80 <= b < 0xC0:
            raise UnsupportedTokenizer(f"the vocabulary has no token for the UTF-8 continuation byte {b:#x}")
        ranges.append(_lead_byte_range(b))
    if not ranges:
        return None
    return re.compile("[" + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges) + "]")


def _lead_byte_range(b: int) -> tuple[int, int]:
    """The code points whose UTF-8 form starts with byte ``b``."""
    if b < 0x80:
        return b, b
    if b < 0xE0:
        return (b & 0x1F) << 6, ((b & 0x1F) << 6) + 0x3F
    if b < 0xF0:  # E0 starts at U+0800 (shorter forms are overlong)
        return max((b & 0x0F) << 12, 0x800), ((b & 0x0F) << 12) + 0xFFF
    return max((b & 0x07) << 18, 0x10000), min(((b & 0x07) << 18) + 0x3FFFF, 0x10FFFF)
