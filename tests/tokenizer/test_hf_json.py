"""Zero deviations from Hugging Face tokenizers on tokenizer.json files built from the same
ranks, in the shapes real models ship; unsupported fields are refused by name."""
from __future__ import annotations

import copy
import json

import pytest

from tests.tokenizer.conftest import report
from tests.tokenizer.references import (assert_corpora_identical, assert_mixed_text_identical, byte_level, hf_tokenizer,
                                        split, tokenizer_json)
from zllm_core.tokenizer import Tokenizer, UnsupportedTokenizer

SHAPES = ["gpt2", "cl100k", "llama3", "o200k", "qwen2", "smollm", "multi_split"]


@pytest.fixture(scope="module")
def pairs(hf_json_dir):
    return {s: (Tokenizer.from_tokenizer_json(hf_json_dir / f"{s}.json"), hf_tokenizer(hf_json_dir / f"{s}.json"))
            for s in SHAPES}


@pytest.mark.parametrize("shape", SHAPES)
def test_corpora_match_hugging_face(shape, pairs, documents, capsys):
    ours, ref = pairs[shape]
    tokens = assert_corpora_identical(ours, ref, documents, shape)
    chars = sum(len(d) for docs in documents.values() for d in docs)
    report(capsys, f"tokenizer.json {shape}: {chars:,} characters, {tokens:,} tokens identical to Hugging Face")


@pytest.mark.parametrize("shape", SHAPES)
def test_mixed_text_matches_hugging_face(shape, pairs):
    assert_mixed_text_identical(*pairs[shape], examples=150)


def test_added_tokens_are_specials(pairs):
    ours, ref = pairs["qwen2"]
    text = "a<|im_start|>user\nhi<|im_end|><|endoftext|>"
    assert ours.encode(text, allowed_special="all") == ref.encode(text, add_special_tokens=False).ids
    assert ours.special_tokens["<|im_start|>"] == ref.token_to_id("<|im_start|>")


@pytest.fixture(scope="module")
def small_json() -> dict:
    tokens = [bytes([b]) for b in range(256)] + [b"ab", b"abc", b" a"]
    return tokenizer_json(tokens, ["<s>"], {"type": "Sequence", "pretokenizers": [split(r"\p{N}{1,3}"), byte_level()]})


REFUSED = {
    "normalizer.type": lambda j: j.update(normalizer={"type": "NFKC"}),
    "model.byte_fallback": lambda j: j["model"].update(byte_fallback=True),
    "model.type": lambda j: j["model"].update(type="WordPiece"),
    "model.dropout": lambda j: j["model"].update(dropout=0.1),
    "model.continuing_subword_prefix": lambda j: j["model"].update(continuing_subword_prefix="##"),
    "add_prefix_space": lambda j: j["pre_tokenizer"]["pretokenizers"][-1].update(add_prefix_space=True),
    "pattern.Regex": lambda j: j["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex=r"\w+"),
    "behavior": lambda j: j["pre_tokenizer"]["pretokenizers"][0].update(behavior="Removed"),
    "pretokenizers[0].type": lambda j: j["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "Whitespace"}),
    "pretokenizers[0].individual_digits": lambda j: j["pre_tokenizer"]["pretokenizers"].insert(
        0, {"type": "Digits", "individual_digits": False}),
    "the last step must be ByteLevel": lambda j: j["pre_tokenizer"]["pretokenizers"].pop(),
    "added_tokens[0].lstrip": lambda j: j["added_tokens"][0].update(lstrip=True),
    "added_tokens[0].id": lambda j: j["added_tokens"][0].update(id=5000),
    "truncation": lambda j: j.update(truncation={"max_length": 8}),
    "decoder.type": lambda j: j.update(decoder={"type": "WordPiece"}),
}


@pytest.mark.parametrize("field", REFUSED)
def test_unsupported_fields_are_refused_by_name(field, small_json, tmp_path):
    data = copy.deepcopy(small_json)
    REFUSED[field](data)
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(UnsupportedTokenizer, match=field.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        Tokenizer.from_tokenizer_json(tmp_path / "tokenizer.json")


def test_small_json_matches_hugging_face(small_json, tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps(small_json))
    ours = Tokenizer.from_pretrained(tmp_path)
    ref = hf_tokenizer(tmp_path / "tokenizer.json")
    text = "abc ab 12345 a<s>b"
    assert ours.encode(text, allowed_special="all") == ref.encode(text, add_special_tokens=False).ids
