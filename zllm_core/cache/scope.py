"""The scope of a cached state: everything but the tokens that determines its keys and values.

Sharing happens only between identical scopes, and the scope enters every block key,
so it must be assembled with the care of an artefact manifest: model weights and dtype,
tokenizer (its manifest covers the chat template files too), and the tenant.
"""
from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path

# Bytes sampled from each end of every weight file: with the headers (names, shapes,
# dtypes, offsets) and sizes, a changed checkpoint changes the manifest without hashing
# tens of gigabytes at every start.
_SAMPLE = 1 << 20
_GGUF_HEADER = 16 << 20


def model_manifest(model_dir: Path, dtype: str) -> str:
    """A stable digest of a checkpoint directory (or GGUF file) as served in ``dtype``."""
    h = hashlib.sha256(f"dtype={dtype}\n".encode())
    if model_dir.is_file():
        h.update(gguf_digest(model_dir).encode())
        return h.hexdigest()
    for name in ("config.json", "generation_config.json"):
        path = model_dir / name
        if path.exists():
            h.update(name.encode() + b"\0" + path.read_bytes())
    for path in sorted(model_dir.glob("*.safetensors")):
        size = path.stat().st_size
        with path.open("rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            h.update(path.name.encode() + b"\0" + str(size).encode() + f.read(header_len))
            h.update(f.read(_SAMPLE))
            f.seek(max(8 + header_len, size - _SAMPLE))
            h.update(f.read(_SAMPLE))
    return h.hexdigest()


@dataclass(frozen=True)
class Scope:
    model: str  # model_manifest()
    tokenizer: str = ""  # tokenizer_manifest()
    tenant: str = ""

    def digest(self) -> bytes:
        """32 bytes that enter every block hash of this scope."""
        body = json.dumps([self.model, self.tokenizer, self.tenant], separators=(",", ":"))
        return hashlib.sha256(body.encode()).digest()


def gguf_digest(path: Path) -> str:
    """A GGUF file's name, size, header (metadata and tensor index, which GGUF puts first: up to
    _GGUF_HEADER bytes of it) and sampled end: tokenizer and template live in the header too."""
    h = hashlib.sha256(path.name.encode() + b"\0" + str(path.stat().st_size).encode())
    with path.open("rb") as f:
        h.update(f.read(_GGUF_HEADER))
        f.seek(max(0, path.stat().st_size - _SAMPLE))
        h.update(f.read(_SAMPLE))
    return h.hexdigest()


def tokenizer_manifest(model_dir: Path) -> str:
    """Digest of the files that define tokenization (and the template inside tokenizer_config)."""
    if model_dir.is_file():
        return gguf_digest(model_dir)
    h = hashlib.sha256()
    for path in sorted(model_dir.iterdir()):
        if path.name.startswith("tokenizer") or path.suffix == ".tiktoken" or path.suffix == ".jinja":
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class CacheHint:
    """Per-request cache inputs from the protocol layer."""

    tenant: str = ""  # from the API key
    cache_id: str | None = None  # prompt_cache_key / previous_response_id / session header

    def scope(self, base: Scope) -> Scope:
        return Scope(base.model, base.tokenizer, self.tenant)
