"""Hugging Face tokenizer.json (byte-level BPE) -> Vocabulary.

Accepted: model BPE without dropout, byte_fallback or subword affixes; normalizer NFC or none;
pre_tokenizer ByteLevel, or Split(Regex, Isolated) or Digits(individual_digits) steps followed by
ByteLevel, possibly in a Sequence (the Llama 3 / Qwen2 / DeepSeek-V3 / SmolLM shapes); added_tokens as specials. Everything
else is refused with UnsupportedTokenizer naming the field, never approximated.
A post_processor only adds template tokens (add_special_tokens=True); encode() matches
Hugging Face's encode(text, add_special_tokens=False), so it is not applied.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from zllm_core.tokenizer.rules import (DIGITS, GPT2_BYTE_LEVEL_PATTERN, Rules, UnsupportedTokenizer,
                                       rules_for_pattern)
from zllm_core.tokenizer.vocabulary import Vocabulary


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def load_tokenizer_json(path: str | os.PathLike) -> Vocabulary:
    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    for field in ("truncation", "padding"):
        if spec.get(field) is not None:
            raise UnsupportedTokenizer(f"{field}: must be null")
    model = spec.get("model") or {}
    _check_model(model)
    _check_decoder(spec.get("decoder"))
    tokens, ids = _tokens(model["vocab"])
    return Vocabulary(
        name=Path(path).parent.name or "tokenizer.json",
        tokens=tokens,
        merges=_merges(model["merges"], ids),
        whole_piece_first=bool(model.get("ignore_merges", False)),
        rules=_pre_tokenizer_rules(spec.get("pre_tokenizer")),
        special_tokens=_added_tokens(spec.get("added_tokens") or [], ids),
        normalizer=_normalizer(spec.get("normalizer")),
    )


def _check_model(model: dict) -> None:
    if model.get("type") != "BPE":
        raise UnsupportedTokenizer(f"model.type: {model.get('type')!r} is not BPE")
    if model.get("dropout") not in (None, 0, 0.0):
        raise UnsupportedTokenizer("model.dropout: must be null")
    if model.get("byte_fallback"):
        raise UnsupportedTokenizer("model.byte_fallback: must be false (byte-level BPE only)")
    for field in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(field):
            raise UnsupportedTokenizer(f"model.{field}: must be empty")


def _check_decoder(decoder: dict | None) -> None:
    if decoder is not None and decoder.get("type") != "ByteLevel":
        raise UnsupportedTokenizer(f"decoder.type: {decoder.get('type')!r} is not ByteLevel")


def _tokens(vocab: dict[str, int]) -> tuple[list[bytes], dict[str, int]]:
    alphabet = byte_level_alphabet()
    tokens = [b""] * (max(vocab.values()) + 1)
    for text, token_id in vocab.items():
        try:
            tokens[token_id] = bytes(alphabet[ch] for ch in text)
        except KeyError:
            raise UnsupportedTokenizer(f"model.vocab: {text!r} is not byte-level") from None
    return tokens, vocab


def _merges(merges: list, ids: dict[str, int]) -> list[tuple[int, int]]:
    out = []
    for m in merges:
        left, right = m.split(" ") if isinstance(m, str) else m
        if left not in ids or right not in ids:
            raise UnsupportedTokenizer(f"model.merges: {m!r} names a token absent from model.vocab")
        out.append((ids[left], ids[right]))
    if not out:
        raise UnsupportedTokenizer("model.merges: empty")
    return out


def _normalizer(normalizer: dict | None) -> str | None:
    if normalizer is None:
        return None
    if normalizer.get("type") == "NFC":
        return "NFC"
    raise UnsupportedTokenizer(f"normalizer.type: {normalizer.get('type')!r} (only NFC or none)")


def _pre_tokenizer_rules(pre: dict | None) -> tuple[Rules, ...]:
    if pre is None:
        raise UnsupportedTokenizer("pre_tokenizer: byte-level BPE needs a ByteLevel step")
    steps = pre["pretokenizers"] if pre.get("type") == "Sequence" else [pre]
    *splits, last = steps
    if last.get("type") != "ByteLevel":
        raise UnsupportedTokenizer("pre_tokenizer: the last step must be ByteLevel")
    rules = [_split_rules(s, f"pre_tokenizer.pretokenizers[{k}]") for k, s in enumerate(splits)]
    if last.get("add_prefix_space"):
        raise UnsupportedTokenizer("pre_tokenizer ByteLevel.add_prefix_space: must be false")
    if last.get("use_regex", True):
        rules.append(rules_for_pattern(GPT2_BYTE_LEVEL_PATTERN, "pre_tokenizer ByteLevel.use_regex", "onig"))
    return tuple(rules)


def _split_rules(step: dict, field: str) -> Rules:
    if step.get("type") == "Digits":  # SmolLM's shape: every digit (char::is_numeric, i.e. \p{N}) alone
        if not step.get("individual_digits"):
            raise UnsupportedTokenizer(f"{field}.individual_digits: only true")
        return DIGITS
    if step.get("type") != "Split":
        raise UnsupportedTokenizer(f"{field}.type: {step.get('type')!r} (only Split or Digits before ByteLevel)")
    if step.get("behavior") != "Isolated" or step.get("invert"):
        raise UnsupportedTokenizer(f"{field}.behavior: only Isolated without invert")
    pattern = step.get("pattern") or {}
    if "Regex" not in pattern:
        raise UnsupportedTokenizer(f"{field}.pattern: only Regex patterns")
    return rules_for_pattern(pattern["Regex"], f"{field}.pattern.Regex", "onig")


def _added_tokens(added: list[dict], vocab: dict[str, int]) -> dict[str, int]:
    """Added tokens, with the ids Hugging Face really gives them: a token in model.vocab keeps
    its vocab id; a new one gets the next id after the vocab (len(vocab)) or after the last
    added id. A file declaring other ids is refused rather than encoded differently."""
    specials: dict[str, int] = {}
    for k, tok in enumerate(added):
        for flag in ("single_word", "lstrip", "rstrip"):
            if tok.get(flag):
                raise UnsupportedTokenizer(f"added_tokens[{k}].{flag}: must be false")
        content = tok["content"]
        if content in vocab:
            assigned = vocab[content]
        else:
            last = max(specials.values(), default=-1)
            assigned = last + 1 if last >= len(vocab) else len(vocab)
        if tok["id"] != assigned:
            raise UnsupportedTokenizer(f"added_tokens[{k}].id: {tok['id']} but Hugging Face assigns {assigned}")
        specials.setdefault(content, assigned)
    return specials
