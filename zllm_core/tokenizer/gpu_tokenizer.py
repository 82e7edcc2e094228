"""Full tokenization on a GPU: whole texts, or batches of them, tokenized by the kernels of
csrc/gpu_tokenize_kernels.cuh exactly as the CPU tokenizer tokenizes them.

The device reads the CPU's own definitions: the rule table (`Rules.to_native()`, the
`Grammar` the CPU scanner runs on), the class table of csrc/class_table.h uploaded as is, and
merge priorities with the CPU's order (lowest first, leftmost on ties). Pre-tokenization is
parallel: per-character classes, run ends from bit sets with summary levels, an anchor
predicate over class pairs (positions no piece of the family can span), and from each anchor
a walk through the CPU scanner's alternatives to the next anchor. A walk that would cross an
anchor voids the run (`flags`) and the CPU path redoes the text, so the device never returns
an approximation. Merging runs in length buckets (thread, warp, block); ids come back in order
with the code point offset where each token ends (what a session's TokenRun keeps).

Backends: `CudaBackend` (builds that compiled csrc/*.cu, a CUDA device present), or the host
emulation of the same kernels (tests/kernels/gpu_tokenize_emulated.py) that CI runs.
"""
from __future__ import annotations

import functools

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from zllm_core import _native
from zllm_core.tokenizer.rules import Contractions, Letters, UnsupportedTokenizer
from zllm_core.tokenizer.tokenizer import Tokenizer, repair_surrogates

log = logging.getLogger(__name__)

MAX_STAGES = 4  # csrc/gpu_tokenize.h kMaxStages
MAX_BATCH_BYTES = _native.gpu_max_batch_bytes  # of UTF-8 in one run (kMaxCapacity)


class DeviceUnsupported(UnsupportedTokenizer):
    """A tokenizer whose rules or tables the device path cannot reproduce exactly; it stays on
    the CPU path."""


def device_support(tokenizer: Tokenizer) -> str | None:
    """Why the device path cannot take `tokenizer` exactly, or None. The walk transliterates
    the CPU scanner's alternatives for the rule kinds rules.py defines; a rule kind it does not
    know is refused here rather than approximated."""
    if not 1 <= len(tokenizer.rules) <= MAX_STAGES:
        return f"{len(tokenizer.rules)} pre-tokenizer steps (the device takes 1 to {MAX_STAGES})"
    for r in tokenizer.rules:
        if r.contractions not in set(Contractions):
            return f"rules {r.name!r}: contractions kind {r.contractions!r}"
        if r.letters not in set(Letters):
            return f"rules {r.name!r}: letters kind {r.letters!r}"
        if not 0 <= r.digit_group <= 255:
            return f"rules {r.name!r}: digit groups of {r.digit_group}"
    return None


@functools.cache
def cuda_available() -> bool:
    """Whether this build runs CUDA kernels and a CUDA device is present. Asked once per
    process: on a host without a driver the CUDA runtime's first answer takes ~70 ms."""
    return bool(getattr(_native, "with_cuda", False)) and _native.cuda_device_count() > 0


class Backend(Protocol):
    def run(self, core: _native.TokenizerCore, policy: _native.SpecialPolicy, texts: list[str],
            ends: bool = True, pieces: bool = False) -> dict: ...


class CudaBackend:
    """The kernels on the current CUDA device (one CUDA graph per capacity bucket)."""

    def __init__(self, tables: _native.GpuTables):
        self._device = _native.GpuTokenizerCuda(tables)

    def run(self, core, policy, texts, ends=True, pieces=False) -> dict:
        return self._device.encode(core, policy, texts, ends, pieces)


@dataclass(frozen=True)
class DeviceBatch:
    """One run's results over the texts of a batch, back to back."""

    ids: np.ndarray         # uint32
    ends: np.ndarray | None  # uint32: code point offset (in the batch's text) where each token ends
    doc_tokens: np.ndarray  # texts + 1: where each text's tokens begin
    piece_ends: np.ndarray | None  # uint32 byte offsets, when asked for

    def text_ids(self, k: int) -> np.ndarray:
        return self.ids[self.doc_tokens[k]:self.doc_tokens[k + 1]]


class GpuTokenizer:
    """`Tokenizer.encode` of whole texts on a device. Methods return None where the CPU path
    must take the text instead: it holds a disallowed special (the CPU path raises the error)
    or the device voided the run."""

    def __init__(self, tokenizer: Tokenizer, backend: Callable[[_native.GpuTables], Backend] = CudaBackend):
        reason = device_support(tokenizer)
        if reason is not None:
            raise DeviceUnsupported(f"{tokenizer.name}: {reason}")
        merges = np.asarray(tokenizer.merges, dtype=np.uint32).reshape(-1, 2)
        try:
            self.tables = _native.gpu_tables(tokenizer.native, merges, [r.to_native() for r in tokenizer.rules])
        except ValueError as e:  # a table the device cannot hold (ranks past 2^24, ...)
            raise DeviceUnsupported(f"{tokenizer.name}: {e}") from None
        self.tokenizer = tokenizer
        self.backend = backend(self.tables)
        self.void_runs = 0

    def run(self, texts: Sequence[str], policy: _native.SpecialPolicy, ends: bool = True,
            pieces: bool = False) -> DeviceBatch | None:
        """One device run over `texts`; `ends`: with each token's end offset, `pieces`: with the
        pieces' end offsets."""
        texts = [self.tokenizer.normalize(t) for t in texts]
        if sum(map(len, texts)) * 4 > MAX_BATCH_BYTES and sum(len(t.encode("utf-8", "surrogatepass"))
                                                              for t in texts) > MAX_BATCH_BYTES:
            return None
        core = self.tokenizer.native
        try:
            out = self.backend.run(core, policy, texts, ends, pieces)
        except UnicodeEncodeError:  # lone surrogates: tiktoken's repair, as the CPU path does
            out = self.backend.run(core, policy, [repair_surrogates(t) for t in texts], ends, pieces)
        if out["disallowed"] >= 0:
            return None
        if out["flags"]:
            self.void_runs += 1
            log.warning("GPU tokenizer voided a run (flags %#x); the CPU path takes it", out["flags"])
            return None
        return DeviceBatch(out["ids"], out.get("ends"), out["doc_tokens"], out.get("piece_ends"))

    def encode(self, text: str, policy: _native.SpecialPolicy) -> np.ndarray | None:
        batch = self.run([text], policy, ends=False)
        return None if batch is None else batch.ids

    def encode_batch(self, texts: Sequence[str], policy: _native.SpecialPolicy) -> list[np.ndarray] | None:
        batch = self.run(texts, policy, ends=False)
        return None if batch is None else [batch.text_ids(k) for k in range(len(texts))]

    def encode_run(self, text: str, policy: _native.SpecialPolicy) -> _native.TokenRun | None:
        """A session's TokenRun of `text` (ids and their code point end offsets)."""
        batch = self.run([text], policy)
        return None if batch is None else _native.token_run(batch.ids, batch.ends)
