"""The class rules alone (no BPE) reproduce the reference regex's pieces exactly."""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings

from tests.tokenizer.conftest import report
from tests.tokenizer.references import regex_pieces
from tests.tokenizer.strategies import (ASCII_FRAGMENTS, CONTRACTIONS, DIGITS, EMOJI, LETTERS, MARKS, PUNCT, SPACES,
                                        ascii_text, mixed_text)
from zllm_core import _native
from zllm_core.tokenizer.rules import CL100K_PATTERN, ONIG_PATTERNS, PATTERNS, Rules
from zllm_core.tokenizer.tokenizer import Tokenizer
from zllm_core.tokenizer.vocabulary import Vocabulary

# Oniguruma reads `{1,3}+` as a repetition, so tiktoken's possessive digit group is spelt as
# an atomic group to make Oniguruma a reference for the tiktoken reading too.
CASES = [(p, r, p.replace(r"\p{N}{1,3}+", r"(?>\p{N}{1,3})") if p == CL100K_PATTERN else p)
         for p, r in PATTERNS.items()]
CASES += [(CL100K_PATTERN, ONIG_PATTERNS[CL100K_PATTERN], CL100K_PATTERN)]
IDS = [f"{r.name}-{k}" for k, (_, r, _) in enumerate(CASES)]


def splitter(rules: Rules) -> Tokenizer:
    """A tokenizer whose pieces come from `rules` alone (byte tokens only)."""
    return Tokenizer(Vocabulary(rules.name, [bytes([b]) for b in range(256)], [], True, (rules,), {}))


@pytest.mark.parametrize(("pattern", "rules", "reference"), CASES, ids=IDS)
def test_rules_reproduce_regex_pieces_on_corpora(pattern, rules, reference, documents, capsys):
    tok = splitter(rules)
    chars = pieces = 0
    for name, docs in documents.items():
        for doc in docs:
            expected = regex_pieces(reference, doc)
            assert tok.pieces(doc) == expected, f"{rules.name} pieces deviate on a {name} document"
            chars += len(doc)
            pieces += len(expected)
    report(capsys, f"{rules.name} rules: {chars:,} characters, {pieces:,} pieces identical to the regex")


@pytest.mark.parametrize("texts", [mixed_text, ascii_text], ids=["mixed", "ascii"])
@pytest.mark.parametrize(("pattern", "rules", "reference"), CASES, ids=IDS)
def test_rules_reproduce_regex_pieces_on_generated_text(pattern, rules, reference, texts):
    """Mixed scripts take the scanner; long ASCII stretches the native block rules (64-byte windows)."""
    tok = splitter(rules)

    @settings(max_examples=300, deadline=None, database=None)
    @given(texts)
    def check(text):
        assert tok.pieces(text) == regex_pieces(reference, text)

    check()


@pytest.mark.parametrize(("pattern", "rules", "reference"), CASES, ids=IDS)
def test_rules_reproduce_regex_pieces_on_long_ascii_text(pattern, rules, reference):
    """Every pair of ASCII fragments, many times over, inside 64-byte windows of the block rules."""
    rng = random.Random(0)
    text = "".join(rng.choice(ASCII_FRAGMENTS + CONTRACTIONS) for _ in range(40_000))
    assert splitter(rules).pieces(text) == regex_pieces(reference, text)


@pytest.mark.parametrize(("pattern", "rules", "reference"), CASES, ids=IDS)
def test_rules_reproduce_regex_pieces_on_long_mixed_text(pattern, rules, reference):
    """Long mixed-script text, so that 64-byte windows holding non-ASCII letters, marks,
    punctuation and symbols (the block rules for prose) meet every kind of neighbour."""
    rng = random.Random(1)
    fragments = LETTERS * 3 + PUNCT * 2 + (" ",) * 8 + MARKS + DIGITS + EMOJI + SPACES + CONTRACTIONS + ASCII_FRAGMENTS
    text = "".join(rng.choice(fragments) for _ in range(40_000))
    assert splitter(rules).pieces(text) == regex_pieces(reference, text)


@pytest.mark.parametrize(("pattern", "rules", "reference"), CASES, ids=IDS)
def test_rules_reproduce_regex_pieces_where_caseless_letters_meet_cased_ones(pattern, rules, reference):
    """Letters of every case and caseless ones (CJK, Hangul, Arabic) run into each other inside
    64-byte windows: o200k's pattern counts caseless letters as both cases, so where one
    touches an upper-case letter the block rules must leave the run to the scanner."""
    rng = random.Random(2)
    fragments = LETTERS * 4 + ("A", "b", "Ab", "aB", "AB", "Ǆ", "ǅ", "ǆ", " ", " ", "'s", "'S", "«", "-", "\n")
    text = "".join(rng.choice(fragments) for _ in range(40_000))
    assert splitter(rules).pieces(text) == regex_pieces(reference, text)


def test_every_supported_family_is_exact():
    assert all(r.exact for r in ONIG_PATTERNS.values())


def test_block_masks_agree_on_every_simd_path(documents):
    """The block rules' class masks come from AVX2 or SSE2 by CPU: both give the same bits."""
    rng = random.Random(5)
    texts = [bytes(range(256)) * 2, bytes(rng.randrange(256) for _ in range(20_000))]
    texts += [doc.encode() for docs in documents.values() for doc in docs[:3]]
    assert all(_native.simd_masks_agree(t) for t in texts)


def test_char_classes_expose_one_class_per_code_point():
    assert list(_native.char_classes("aA1 \n\r.é\u0301ǅ")) == [2, 1, 7, 8, 10, 9, 0, 2, 6, 3]


def test_class_table_levels_give_every_code_point_its_class():
    """The two-level table the GPU path shares: block -> row, row -> 64 classes."""
    row_of_block, rows = _native.class_table()
    row_of_block, rows = np.frombuffer(row_of_block, dtype="<u2"), np.frombuffer(rows, dtype=np.uint8)
    cps = np.array([c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF])
    expected = np.frombuffer(_native.char_classes("".join(map(chr, cps))), dtype=np.uint8)
    assert (rows[row_of_block[cps >> 6].astype(np.int64) * 64 + (cps & 63)] == expected).all()
