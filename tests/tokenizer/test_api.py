"""The Tokenizer interface: tiktoken's special-token semantics, malformed input, constructors."""
from __future__ import annotations

import json
import random
import re
import shutil
import time

import numpy as np
import pytest

from tests.tokenizer.conftest import report
from zllm_core.tokenizer import Tokenizer, UnsupportedTokenizer
from zllm_core.tokenizer.vocabulary import PACKAGE_VOCAB

CHAT = "<|im_start|>user\nhi <think>x</think><|im_end|><|endoftext|>"


@pytest.fixture(scope="module")
def qwen(family_tokenizers):
    return family_tokenizers["qwen2"]


@pytest.fixture(scope="module")
def cl100k(family_tokenizers, tiktoken_encodings):
    return family_tokenizers["cl100k_base"], tiktoken_encodings["cl100k_base"]


def test_disallowed_special_text_raises_like_tiktoken(cl100k):
    ours, ref = cl100k
    for enc in (ours.encode, ref.encode):
        with pytest.raises(ValueError, match=re.escape("disallowed special token '<|endoftext|>'")):
            enc("hello <|endoftext|>")


@pytest.mark.parametrize("allowed, disallowed", [
    ("all", "all"), ({"<|endoftext|>"}, ()), (set(), ()), ({"<|fim_prefix|>"}, {"<|endofprompt|>"}),
])
def test_special_policies_match_tiktoken(cl100k, allowed, disallowed):
    ours, ref = cl100k
    text = "a<|endoftext|>b <|fim_prefix|>c<|endoftext|><|fim_middle|>"
    assert ours.encode(text, allowed_special=allowed, disallowed_special=disallowed) == \
        ref.encode(text, allowed_special=allowed, disallowed_special=disallowed)


def test_special_not_allowed_but_disallowed_elsewhere_raises(cl100k):
    ours, _ = cl100k
    with pytest.raises(ValueError, match="fim_middle"):
        ours.encode("<|endoftext|> <|fim_middle|>", allowed_special={"<|endoftext|>"})


def test_empty_string(cl100k):
    ours, _ = cl100k
    assert ours.encode("") == [] and ours.count("") == 0 and ours.decode([]) == ""


@pytest.mark.parametrize("text", ["a\ud800b", "\ud83d\ude00 pair", "x\udfff", "\udc00\ud800"])
def test_lone_surrogates_are_repaired_like_tiktoken(cl100k, text):
    ours, ref = cl100k
    assert ours.encode(text) == ref.encode(text)


def test_decode_replaces_invalid_utf8_like_tiktoken(cl100k):
    ours, ref = cl100k
    ids = ref.encode("é中👍")
    broken = [t for t in ids for _ in (0, 1)][1:]  # duplicated tokens split multibyte sequences
    assert ours.decode(broken) == ref.decode(broken)
    assert ours.decode_bytes(broken) == ref.decode_bytes(broken)
    assert all(ours.token_bytes(t) == ref.decode_single_token_bytes(t) for t in ids)


def test_vocab_size_and_special_tokens(cl100k, qwen):
    ours, ref = cl100k
    assert ours.vocab_size == ref.n_vocab
    assert ours.special_tokens == ref._special_tokens
    assert len(qwen.special_tokens) == 26 and qwen.vocab_size == 151669
    assert qwen.special_tokens["<think>"] == 151667 and qwen.special_tokens["</tool_response>"] == 151666


def test_count_and_batch_agree_with_encode(qwen):
    rng = random.Random(0)
    texts = ["".join(rng.choice("ab c\n1'é中") for _ in range(rng.randint(0, 300))) for _ in range(64)]
    texts.append(CHAT)
    assert qwen.encode_batch(texts, allowed_special="all", num_threads=3) == \
        [qwen.encode(t, allowed_special="all") for t in texts]
    assert all(qwen.count(t, allowed_special="all") == len(qwen.encode(t, allowed_special="all")) for t in texts)
    arrays = [qwen.encode_to_numpy(t, allowed_special="all") for t in texts]
    assert all(a.dtype == np.uint32 and a.tolist() == qwen.encode(t, allowed_special="all") for a, t in zip(arrays, texts))


def test_numpy_arrays_keep_their_ids_while_buffers_are_reused(qwen):
    """encode_to_numpy lends its buffer to the array and reuses it once the array is gone."""
    texts = [f"text {k} " * (50 * k + 1) for k in range(8)]
    kept = qwen.encode_to_numpy(texts[0])
    for k, text in enumerate(texts):
        arr = qwen.encode_to_numpy(text)
        assert arr.tolist() == qwen.encode(text)
        del arr
    assert kept.tolist() == qwen.encode(texts[0])


def test_batch_raises_on_disallowed_special(qwen):
    with pytest.raises(ValueError, match="im_start"):
        qwen.encode_batch(["fine", CHAT])


@pytest.mark.parametrize("piece", ["a" * 5000, " " * 3000 + "x", "9" * 4000, "ab" * 2000,
                                   "".join(random.Random(1).choice("qwertyuiop") for _ in range(6000))])
def test_long_pieces_match_tiktoken(family_tokenizers, tiktoken_encodings, piece):
    for family in ("r50k_base", "o200k_base"):
        assert family_tokenizers[family].encode(piece) == tiktoken_encodings[family].encode(piece)


def test_50mb_without_newlines_is_linear(cl100k, capsys):
    ours, _ = cl100k
    line = "def f(x): return x * 2 + y_value; # comment " * 1_200_000
    start = time.perf_counter()
    n = ours.count(line[:50_000_000])
    elapsed = time.perf_counter() - start
    one_piece = "x" * 2_000_000
    start = time.perf_counter()
    ours.count(one_piece)
    piece_elapsed = time.perf_counter() - start
    report(capsys, f"50 MB without newlines: {n:,} tokens in {elapsed:.2f}s; one 2 MB piece in {piece_elapsed:.2f}s")
    assert elapsed < 30 and piece_elapsed < 10


def test_from_pretrained_uses_the_family_named_in_tokenizer_config(tmp_path, qwen):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"zllm_tokenizer_family": "qwen2"}))
    tok = Tokenizer.from_pretrained(tmp_path)
    assert tok.encode(CHAT, allowed_special="all") == qwen.encode(CHAT, allowed_special="all")


def test_from_pretrained_without_tokenizer_files_is_refused(tmp_path):
    with pytest.raises(UnsupportedTokenizer, match="zllm_tokenizer_family"):
        Tokenizer.from_pretrained(tmp_path)


def test_vocabulary_with_wrong_sha256_is_refused(tmp_path):
    shutil.copy(PACKAGE_VOCAB / "r50k_base.tiktoken", tmp_path / "r50k_base.tiktoken")
    with open(tmp_path / "r50k_base.tiktoken", "ab") as f:
        f.write(b"IQ== 99999\n")
    with pytest.raises(ValueError, match="sha256"):
        Tokenizer.from_family("r50k_base", tmp_path)


def test_unknown_family_is_refused():
    with pytest.raises(KeyError, match="unknown tokenizer family"):
        Tokenizer.from_family("no_such_family")
