"""A GGUF file's tokenizer metadata (``tokenizer.ggml.*``) -> Vocabulary.

Accepted: ``tokenizer.ggml.model = gpt2`` (byte-level BPE) with tokens, merges and token types,
and a ``tokenizer.ggml.pre`` this project has exact rules for.  Each ``pre`` name stands for
the Hugging Face pipeline its vocabulary was trained with (llama.cpp's llama-vocab.cpp runs
the same regexes); names not listed are refused, never approximated.  Tokens typed CONTROL or
USER_DEFINED are stored as their text (not in the byte alphabet) and become specials, as
llama.cpp matches them whole.
"""
from __future__ import annotations

from pathlib import Path

from zllm_core.model.gguf_file import GGUFFile, open_gguf
from zllm_core.tokenizer.hf_json import byte_level_alphabet
from zllm_core.tokenizer.rules import DIGITS, LLAMA3, QWEN2, R50K, Rules, UnsupportedTokenizer
from zllm_core.tokenizer.vocabulary import Vocabulary

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types

# pre -> (pre-tokenizer steps, whole_piece_first), as the model's own tokenizer.json has them.
PRE_TOKENIZERS: dict[str, tuple[tuple[Rules, ...], bool]] = {
    "gpt-2": ((R50K,), False),            # ByteLevel(use_regex=True)
    "smollm": ((DIGITS, R50K), False),    # Digits(individual_digits=True), then ByteLevel(use_regex=True)
    "qwen2": ((QWEN2,), False),           # Split(Qwen2's regex), ByteLevel(use_regex=False)
    "llama-bpe": ((LLAMA3,), True),       # Split(Llama 3's regex), ByteLevel; BPE ignore_merges
}


def load_gguf_vocabulary(path: str | Path) -> Vocabulary:
    file = open_gguf(path)
    model = _get(file, "tokenizer.ggml.model", str)
    if model != "gpt2":
        raise UnsupportedTokenizer(f"{file.path}: tokenizer.ggml.model: {model!r} is not supported (only 'gpt2', "
                                   "byte-level BPE)")
    pre = _get(file, "tokenizer.ggml.pre", str)
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedTokenizer(f"{file.path}: tokenizer.ggml.pre: no exact rules for {pre!r} "
                                   f"(supported: {sorted(PRE_TOKENIZERS)})")
    texts = _get(file, "tokenizer.ggml.tokens", list)
    types = _get(file, "tokenizer.ggml.token_type", list)
    if len(types) != len(texts):
        raise UnsupportedTokenizer(f"{file.path}: tokenizer.ggml.token_type has {len(types)} entries for "
                                   f"{len(texts)} tokens")
    specials = {t: i for i, (t, kind) in enumerate(zip(texts, types)) if kind in (CONTROL, USER_DEFINED)}
    rules, whole_piece_first = PRE_TOKENIZERS[pre]
    return Vocabulary(
        name=file.path.stem,
        tokens=_token_bytes(file, texts, specials),
        merges=_merges(file, texts),
        whole_piece_first=whole_piece_first,
        rules=rules,
        special_tokens=specials,
    )


def _get(file: GGUFFile, key: str, kind: type):
    value = file.get(key, kind, None)
    if value is None:
        raise UnsupportedTokenizer(f"{file.path}: {key}: missing")
    return value


def _token_bytes(file: GGUFFile, texts: list[str], specials: dict[str, int]) -> list[bytes]:
    alphabet = byte_level_alphabet()
    special_ids = set(specials.values())
    tokens = []
    for i, text in enumerate(texts):
        if i in special_ids:
            tokens.append(text.encode("utf-8"))
            continue
        try:
            tokens.append(bytes(alphabet[ch] for ch in text))
        except KeyError:
            raise UnsupportedTokenizer(f"{file.path}: tokenizer.ggml.tokens[{i}]: {text!r} is not byte-level") from None
    return tokens


def _merges(file: GGUFFile, texts: list[str]) -> list[tuple[int, int]]:
    ids = {t: i for i, t in enumerate(texts)}
    out = []
    for k, merge in enumerate(_get(file, "tokenizer.ggml.merges", list)):
        left, _, right = merge.partition(" ")
        if left not in ids or right not in ids:
            raise UnsupportedTokenizer(f"{file.path}: tokenizer.ggml.merges[{k}]: {merge!r} names a token "
                                       "absent from tokenizer.ggml.tokens")
        out.append((ids[left], ids[right]))
    if not out:
        raise UnsupportedTokenizer(f"{file.path}: tokenizer.ggml.merges: empty")
    return out
