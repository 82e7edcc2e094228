"""Reference tokenizers built from the same ranks: tiktoken Encodings and Hugging Face
tokenizer.json files (the conversion transformers uses: every split of a token into two
tokens is a merge, ordered by the merged token's rank)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import tiktoken
import tokenizers
from hypothesis import given, settings

from tests.tokenizer.strategies import mixed_text
from zllm_core.tokenizer.hf_json import byte_level_alphabet
from zllm_core.tokenizer.vocabulary import PACKAGE_VOCAB, parse_tiktoken

FAMILIES = ["r50k_base", "cl100k_base", "o200k_base", "qwen2"]


def family_spec(name: str) -> dict:
    return json.loads((PACKAGE_VOCAB / "families.json").read_text())[name]


def family_tokens(name: str) -> list[bytes]:
    return parse_tiktoken((PACKAGE_VOCAB / family_spec(name)["file"]).read_bytes())


def tiktoken_encoding(name: str) -> tiktoken.Encoding:
    spec = family_spec(name)
    ranks = {t: i for i, t in enumerate(family_tokens(name)) if t}
    return tiktoken.Encoding(name, pat_str=spec["pat_str"], mergeable_ranks=ranks,
                             special_tokens=spec["special_tokens"])


def split(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def byte_level(use_regex: bool = False) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": use_regex}


def tokenizer_json(tokens: list[bytes], specials: list[str], pre_tokenizer: dict,
                   normalizer: dict | None = None, ignore_merges: bool = False) -> dict:
    """Specials get the ids Hugging Face assigns added tokens: right after the vocab."""
    text, merges = _vocab_and_merges(tuple(tokens))
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, s in enumerate(specials, len(text))],
        "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": {s: i for i, s in text.items()}, "merges": merges},
    }


@functools.lru_cache(maxsize=4)
def _vocab_and_merges(tokens: tuple[bytes, ...]) -> tuple[dict[int, str], list[list[str]]]:
    to_char = {b: ch for ch, b in byte_level_alphabet().items()}
    text = {i: "".join(to_char[b] for b in t) for i, t in enumerate(tokens) if t}
    rank = {t: i for i, t in enumerate(tokens) if t}
    merges = []
    for t in tokens:
        pairs = sorted((rank[t[:k]], rank[t[k:]]) for k in range(1, len(t)) if t[:k] in rank and t[k:] in rank)
        merges += [[text[l], text[r]] for l, r in pairs]
    return text, merges


def hf_tokenizer(path: Path) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(path))


def regex_pieces(pattern: str, text: str) -> list[str]:
    """The reference regex's pieces (Oniguruma, via a Hugging Face Split)."""
    pre = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), "isolated")
    return [p for p, _ in pre.pre_tokenize_str(text)]


def assert_corpora_identical(ours, ref: tokenizers.Tokenizer, documents: dict[str, list[str]], label: str) -> int:
    """Every corpus encoded by zllm_core (specials allowed) and by Hugging Face (no template
    tokens) gives the same ids; returns the number of tokens compared."""
    tokens = 0
    for name, docs in documents.items():
        expected = [e.ids for e in ref.encode_batch(docs, add_special_tokens=False)]
        assert ours.encode_batch(docs, allowed_special="all") == expected, f"{label} deviates on {name}"
        tokens += sum(map(len, expected))
    return tokens


def assert_mixed_text_identical(ours, ref: tokenizers.Tokenizer, examples: int) -> None:
    """Hypothesis' mixed text (digits, contractions, whitespace runs, specials, scripts) encodes
    alike in zllm_core (specials allowed) and in Hugging Face (no template tokens)."""
    @settings(max_examples=examples, deadline=None, database=None)
    @given(mixed_text)
    def check(text):
        assert ours.encode(text, allowed_special="all") == ref.encode(text, add_special_tokens=False).ids

    check()
