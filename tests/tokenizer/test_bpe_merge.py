"""Byte-pair merging matches tiktoken on pieces of every length: short ones take a flat scan,
long ones a heap, and the limit between them must not show."""
from __future__ import annotations

import random

import pytest

from tests.tokenizer.references import FAMILIES


def long_pieces(rng: random.Random) -> list[str]:
    """Lengths 1-300: indentation, comment rulers and word-like runs, the long pieces of code."""
    out = []
    for n in range(1, 301):
        out += [" " * n, "\n" + " " * n, "#" * n, "-" * n, "=" * n,
                "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_0123456789") for _ in range(n)),
                "".join(rng.choice("ab") for _ in range(n))]
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_pieces_of_every_length_match_tiktoken(family, family_tokenizers, tiktoken_encodings):
    ours, ref = family_tokenizers[family], tiktoken_encodings[family]
    for text in long_pieces(random.Random(7)):
        assert ours.encode(text, disallowed_special=()) == ref.encode_ordinary(text), (family, len(text), text[:20])
