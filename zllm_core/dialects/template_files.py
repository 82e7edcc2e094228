"""Reading a model's chat template and special tokens from its directory or GGUF file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from zllm_core.model.gguf_file import is_gguf, open_gguf

_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def read_template(path: Path, name: str | None = None) -> str | None:
    """A directory's template (`chat_template.jinja`, else `chat_template` in tokenizer_config.json:
    text, or a list of named templates: `name`, else "default"), or a GGUF file's
    `tokenizer.chat_template`."""
    if is_gguf(path):
        return open_gguf(path).chat_template
    jinja_file = path / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = _read_json(path / "tokenizer_config.json").get("chat_template")
    if isinstance(template, list):
        named = {t["name"]: t["template"] for t in template}
        return named.get(name or "default")
    return template


def read_special_tokens(path: Path) -> dict[str, str]:
    """The special tokens a model's template sees, from its tokenizer_config.json or GGUF metadata."""
    if is_gguf(path):
        return open_gguf(path).special_token_texts()
    return special_tokens(_read_json(path / "tokenizer_config.json"))


def special_tokens(config: Mapping[str, Any]) -> dict[str, str]:
    """Special tokens as templates see them (tokenizer_config stores some as {"content": ...})."""
    out = {}
    for key in _SPECIAL_TOKENS:
        value = config.get(key)
        if isinstance(value, Mapping):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    return out


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
