"""GGUF tokenizer metadata written with llama.cpp's own writer, and the Hugging Face pipeline
each ``tokenizer.ggml.pre`` stands for (the reference the GGUF tokenizer must equal)."""
from __future__ import annotations

from pathlib import Path

import gguf
import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers

from zllm_core.tokenizer.rules import LLAMA3, PATTERNS, QWEN2

CONTROL, USER_DEFINED = 3, 4
_LLAMA3 = next(p for p, r in PATTERNS.items() if r is LLAMA3)
_QWEN2 = next(p for p, r in PATTERNS.items() if r is QWEN2)


def _byte_level(use_regex: bool) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)


def _split(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated")


# pre -> (pre-tokenizer, ignore_merges): as the models' own tokenizer.json files have them.
PIPELINES = {
    "gpt-2": (lambda: _byte_level(True), False),
    "smollm": (lambda: pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _byte_level(True)]), False),
    "qwen2": (lambda: pre_tokenizers.Sequence([_split(_QWEN2), _byte_level(False)]), False),
    "llama-bpe": (lambda: pre_tokenizers.Sequence([_split(_LLAMA3), _byte_level(False)]), True),
}


def write_tokenizer_gguf(path: Path, texts: list[str], merges: list[str], types: list[int], pre: str,
                         model: str = "gpt2", template: str | None = None) -> Path:
    """A GGUF holding only tokenizer metadata (and a chat template, when given)."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(texts)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    if template is not None:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def reference_tokenizer(path: Path) -> tokenizers.Tokenizer:
    """Hugging Face tokenizers built from the file's tokens and merges with its pre's pipeline
    (read with gguf.GGUFReader, independently of zllm_core)."""
    fields = gguf.GGUFReader(path).fields
    texts = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ")) for m in fields["tokenizer.ggml.merges"].contents()]
    pre, ignore_merges = PIPELINES[fields["tokenizer.ggml.pre"].contents()]
    tok = tokenizers.Tokenizer(models.BPE({t: i for i, t in enumerate(texts)}, merges, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre()
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(t, special=k == CONTROL, normalized=False)
                    for t, k in zip(texts, types) if k in (CONTROL, USER_DEFINED)])
    return tok
