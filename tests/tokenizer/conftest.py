"""Tokenizer test fixtures: references and corpora, built once per session."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from multilingual import multilingual_documents  # bench/, on the path by tests/conftest.py
from tests.tokenizer import corpus, references
from zllm_core.tokenizer import Tokenizer
from zllm_core.tokenizer.rules import LLAMA3, PATTERNS


@pytest.fixture(scope="session")
def documents(agent_trace: Path) -> dict[str, list[str]]:
    """Corpus name -> documents: standard-library sources, rendered agent sessions, prose,
    and the generated multilingual corpus (many scripts, prose mixed with code)."""
    return {
        "stdlib": corpus.stdlib_sources(),
        "trace": corpus.trace_texts(agent_trace),
        "prose": [corpus.gettext_prose(10_000_000 if corpus.FULL else 300_000)],
        "multilingual": multilingual_documents(5_000_000 if corpus.FULL else 400_000),
    }


@pytest.fixture(scope="session")
def family_tokenizers() -> dict[str, Tokenizer]:
    return {name: Tokenizer.from_family(name) for name in references.FAMILIES}


@pytest.fixture(scope="session")
def tiktoken_encodings() -> dict:
    return {name: references.tiktoken_encoding(name) for name in references.FAMILIES}


@pytest.fixture(scope="session")
def hf_json_dir(tmp_path_factory) -> Path:
    """tokenizer.json files in the shapes real models ship, built from the families' ranks."""
    out = tmp_path_factory.mktemp("hf_json")
    tokens = {name: references.family_tokens(name) for name in references.FAMILIES}
    spec = references.family_spec
    split, byte_level = references.split, references.byte_level
    llama3 = next(p for p, r in PATTERNS.items() if r is LLAMA3)
    shapes = {
        "gpt2": ("r50k_base", byte_level(use_regex=True), None, False),
        "cl100k": ("cl100k_base", {"type": "Sequence", "pretokenizers": [split(spec("cl100k_base")["pat_str"]), byte_level()]}, None, False),
        "llama3": ("cl100k_base", {"type": "Sequence", "pretokenizers": [split(llama3), byte_level()]}, None, True),
        "o200k": ("o200k_base", {"type": "Sequence", "pretokenizers": [split(spec("o200k_base")["pat_str"]), byte_level()]}, None, False),
        "qwen2": ("qwen2", {"type": "Sequence", "pretokenizers": [split(spec("qwen2")["pat_str"]), byte_level()]}, {"type": "NFC"}, False),
        "smollm": ("r50k_base", {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level(use_regex=True)]}, None, False),
        "multi_split": ("cl100k_base", {"type": "Sequence", "pretokenizers": [split(r"\p{N}{1,3}"), split(llama3), byte_level()]}, None, False),
    }
    for shape, (family, pre, normalizer, ignore_merges) in shapes.items():
        data = references.tokenizer_json(tokens[family], list(spec(family)["special_tokens"]), pre, normalizer, ignore_merges)
        (out / f"{shape}.json").write_text(json.dumps(data))
    return out


def report(capsys, line: str) -> None:
    """Print through pytest's capture: the acceptance asks tests to show what they checked."""
    with capsys.disabled():
        print(f"\n  {line}", end="")
