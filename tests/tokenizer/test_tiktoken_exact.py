"""Zero deviations from tiktoken on every .tiktoken family."""
from __future__ import annotations

import random
from itertools import accumulate

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
    """350,000 distinct short words and 140,000 long ones, several tokens each: more short
    pieces than the hot cache keeps at its largest (it grows, then starts again from its seed)
    and more long ones than the piece cache holds (it is cleared), mid-text."""
    ours, ref = family_tokenizers[family], tiktoken_encodings[family]
    rng = random.Random(3)
    lengths = [12] * 350_000 + [17] * 140_000
    rng.shuffle(lengths)
    letters = rng.randbytes(sum(lengths)).translate(bytes(97 + b % 26 for b in range(256))).decode()
    starts = list(accumulate(lengths, initial=0))
    text = "".join(" " + letters[a:b] for a, b in zip(starts, starts[1:]))
    expected = ref.encode_ordinary(text)
    assert ours.encode(text, disallowed_special=()) == expected
    assert ours.encode(text, disallowed_special=()) == expected
