"""Vocabularies: what a native tokenizer is built from, loaded from tiktoken families."""
from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from zllm_core.tokenizer.rules import Rules, rules_for_pattern

PACKAGE_VOCAB = Path(__file__).resolve().parent / "vocab"


@dataclass(frozen=True)
class Vocabulary:
    name: str
    tokens: list[bytes]             # id -> bytes of a mergeable token; b"" where an id is unused
    merges: list[tuple[int, int]]   # (left, right) by priority; empty: priority = merged rank
    whole_piece_first: bool         # a piece that is one token is that token (tiktoken always)
    rules: tuple[Rules, ...]        # pre-tokenizer steps, each refining the previous pieces
    special_tokens: dict[str, int]
    normalizer: str | None = None   # "NFC" or None


def family_names() -> list[str]:
    return sorted(_families())


def load_family(name: str, vocab_dir: str | os.PathLike | None = None) -> Vocabulary:
    families = _families()
    if name not in families:
        raise KeyError(f"unknown tokenizer family {name!r}; known: {sorted(families)}")
    spec = families[name]
    path = _find_file(spec["file"], vocab_dir)
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != spec["sha256"]:
        raise ValueError(f"{path}: sha256 differs from families.json's for {name}")
    return Vocabulary(
        name=name,
        tokens=parse_tiktoken(data),
        merges=[],
        whole_piece_first=True,
        rules=(rules_for_pattern(spec["pat_str"], f"families.json {name}.pat_str"),),
        special_tokens=dict(spec["special_tokens"]),
    )


def parse_tiktoken(data: bytes) -> list[bytes]:
    """`base64(token) rank` lines -> tokens indexed by rank."""
    ranked: dict[int, bytes] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranked[int(rank)] = base64.b64decode(token)
    tokens = [b""] * (max(ranked) + 1)
    for rank, token in ranked.items():
        tokens[rank] = token
    return tokens


def _families() -> dict:
    return json.loads((PACKAGE_VOCAB / "families.json").read_text())


def _find_file(file: str, vocab_dir: str | os.PathLike | None) -> Path:
    """Every family ships in the package; `vocab_dir` names a copy of one's file to use instead
    (checked against the same sha256)."""
    path = Path(vocab_dir or PACKAGE_VOCAB) / file
    if not path.is_file():
        raise FileNotFoundError(f"{path}: vocabulary file not found")
    return path
