"""Zero deviations from tiktoken on every .tiktoken family."""
from __future__ import annotations

import random
import string

import pytest
from hypothesis import given, settings

from tests.tokenizer.conftest import report
from tests.tokenizer.references import FAMILIES
from tests.tokenizer.strategies import mixed_text


@pytest.mark.parametrize("family", FAMILIES)
def test_corpora_match_tiktoken(family, family_tokenizers, tiktoken_encodings, documents, capsys):
    ours, ref = family_tokenizers[family], tiktoken_encodings[family]
    chars = tokens = pieces = 0
    for name, docs in documents.items():
        got = ours.encode_batch(docs, disallowed_special=())
        for doc, ids in zip(docs, got):
            expected = ref.encode_ordinary(doc)
            assert ids == expected, f"{family} deviates on a {name} document"
            chars += len(doc)
            tokens += len(ids)
            pieces += len(ours.pieces(doc))
    report(capsys, f"{family}: {chars:,} characters, {pieces:,} pieces, {tokens:,} tokens identical to tiktoken")


@pytest.mark.parametrize("family", FAMILIES)
def test_mixed_text_matches_tiktoken(family, family_tokenizers, tiktoken_encodings):
    ours, ref = family_tokenizers[family], tiktoken_encodings[family]

    @settings(max_examples=300, deadline=None, database=None)
    @given(mixed_text)
    def check(text):
        assert ours.encode(text, disallowed_special=()) == ref.encode_ordinary(text)

    check()


@pytest.mark.parametrize("family", FAMILIES)
def test_caches_past_their_bounds_match_tiktoken(family, family_tokenizers, tiktoken_encodings):
    """140,000 distinct words of several tokens each: more encodings than the hot cache keeps
    spilled and more pieces than the piece cache holds, so both drop and refill mid-text."""
    ours, ref = family_tokenizers[family], tiktoken_encodings[family]
    rng = random.Random(3)
    text = "".join(" " + "".join(rng.choices(string.ascii_lowercase, k=12)) for _ in range(140_000))
    expected = ref.encode_ordinary(text)
    assert ours.encode(text, disallowed_special=()) == expected
    assert ours.encode(text, disallowed_special=()) == expected
