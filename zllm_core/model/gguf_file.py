"""A GGUF file opened once: its metadata by key and its tensors, checked against the file's size.

llama.cpp's own reader (`gguf.GGUFReader`) parses the header and maps the data; a file it
cannot parse, a tensor of an unknown type or a tensor that runs past the end of the file is
refused here with a `CheckpointError` naming the file (and the tensor), before anything
reads tensor data.  Config, tokenizer and chat template all read the same opened file.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, LlamaFileType, ReaderField

from zllm_core.model.checkpoint_error import CheckpointError

SUFFIX = ".gguf"
_TEMPLATE_TOKENS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
                    "pad_token": "padding_token_id"}


class _CheckedReader(GGUFReader):
    """GGUFReader that checks every tensor's type and extent before mapping its data."""

    def _build_tensors(self, start_offs: int, fields: list[ReaderField]) -> None:
        for field in fields:
            _, name, _, dims, raw_type, offset = field.parts
            name = bytes(name).decode("utf-8", "replace")
            try:
                qtype = GGMLQuantizationType(int(raw_type[0]))
            except ValueError:
                raise CheckpointError(f"tensor '{name}' has unknown ggml type {int(raw_type[0])}") from None
            block_size, block_bytes = GGML_QUANT_SIZES[qtype]
            n_values = int(np.prod(dims.astype(np.int64)))
            if int(dims[0]) % block_size:
                raise CheckpointError(f"tensor '{name}': row length {int(dims[0])} is not a multiple of "
                                      f"{qtype.name}'s block size {block_size}")
            end = start_offs + int(offset[0]) + n_values // block_size * block_bytes
            if end > len(self.data):
                raise CheckpointError(f"tensor '{name}' ends at byte {end}, past the end of the file "
                                      f"({len(self.data)} bytes): the file is truncated or inconsistent")
        super()._build_tensors(start_offs, fields)


class GGUFFile:
    def __init__(self, path: Path):
        self.path = path
        try:
            self.reader = _CheckedReader(path)
        except CheckpointError as e:
            raise CheckpointError(f"{path}: {e}") from None
        except (ValueError, KeyError, IndexError, TypeError, OSError) as e:
            raise CheckpointError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None
        self.tensors = {t.name: t for t in self.reader.tensors}

    def has(self, key: str) -> bool:
        return key in self.reader.fields

    def get(self, key: str, kind: type, default: Any = ...) -> Any:
        """The value of metadata ``key``, checked to be ``kind`` (a list's items are not checked)."""
        field = self.reader.fields.get(key)
        if field is None:
            if default is ...:
                raise self.fail(key, "is missing")
            return default
        value = field.contents()
        if kind is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(key, f"must be {kind.__name__}, got {type(value).__name__} {str(value)[:80]!r}")
        return value

    def fail(self, key: str, problem: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: key '{key}' {problem}")

    @property
    def architecture(self) -> str:
        return self.get("general.architecture", str)

    @property
    def chat_template(self) -> str | None:
        return self.get("tokenizer.chat_template", str, None)

    def special_token_texts(self) -> dict[str, str]:
        """``bos_token``, ``eos_token``, ... as chat templates name them, from the token ids the file sets."""
        texts = self.get("tokenizer.ggml.tokens", list, [])
        out = {}
        for name, key in _TEMPLATE_TOKENS.items():
            token_id = self.get(f"tokenizer.ggml.{key}", int, None)
            if token_id is not None and 0 <= token_id < len(texts):
                out[name] = texts[token_id]
        return out

    @property
    def quantization(self) -> str:
        """The file type llama.cpp names the file by (``Q4_1``), else its most common tensor type."""
        try:
            return LlamaFileType(self.get("general.file_type", int)).name.removeprefix("MOSTLY_")
        except (CheckpointError, ValueError):  # absent, or a number this gguf package does not know
            pass
        types = [t.tensor_type.name for t in self.tensors.values()]
        return max(set(types), key=types.count) if types else "none"


@functools.lru_cache(maxsize=4)
def _open(path: Path, size: int, mtime_ns: int) -> GGUFFile:
    return GGUFFile(path)


def open_gguf(path: str | Path) -> GGUFFile:
    """The parsed file, shared by everything that reads it (parsing SmolLM2's header takes seconds)."""
    path = Path(path).resolve()
    try:
        stat = path.stat()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror})") from None
    return _open(path, stat.st_size, stat.st_mtime_ns)


def is_gguf(path: Path) -> bool:
    return path.suffix == SUFFIX and path.is_file()
