"""The GPU tokenizer's kernels run on the CPU: csrc/gpu_tokenize_kernels.cuh built with g++ over
the fiber SIMT stand-ins of simt_host.h (tests/kernels/gpu_tokenize_host.cpp), as a backend of
zllm_core.tokenizer.gpu_tokenizer.GpuTokenizer. The exactness tests and `bench/tokenize_gpu.py
--emulated` run it, so the code a GPU runs is the code checked against the CPU tokenizer.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from zllm_core import _native

HERE = Path(__file__).resolve().parent
CSRC = HERE.parents[1] / "csrc"
HARNESS = HERE / "gpu_tokenize_host.cpp"
FLAGS = ["-std=c++20", "-O2", "-shared", "-fPIC"]


def library(cache_dir: Path | None = None) -> ctypes.CDLL:
    """The harness as a shared library, built once per content of its sources (cached)."""
    cxx = shutil.which("g++")
    if cxx is None:
        raise RuntimeError("g++ not found: the emulated GPU tokenizer is built from source")
    sources = [HARNESS, HERE / "simt_host.h", *sorted(CSRC.glob("gpu_tokenize*.h")),
               CSRC / "gpu_tokenize_kernels.cuh", CSRC / "class_table.h", CSRC / "pretokenizer.h"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + " ".join(FLAGS).encode()).hexdigest()[:16]
    cache = Path(cache_dir or Path(tempfile.gettempdir()) / "zllm_simt")
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"gpu_tokenize_host_{digest}.so"
    if not out.exists():
        tmp = cache / f".{out.name}.{os.getpid()}"
        subprocess.run([cxx, *FLAGS, f"-I{CSRC}", f"-I{HERE}", str(HARNESS), "-o", str(tmp)],
                       check=True, timeout=600)
        tmp.replace(out)
    lib = ctypes.CDLL(str(out))
    lib.host_gpu_tokenize.argtypes = [ctypes.c_char_p, ctypes.POINTER(GpuRun)]
    lib.host_gpu_tokenize.restype = ctypes.c_int
    return lib


class GpuRun(ctypes.Structure):
    """HostRun of gpu_tokenize_host.cpp, field for field."""

    _fields_ = ([(name, ctypes.c_void_p) for name in ("text", "seg_bounds", "seg_tokens", "doc_offsets",
                                                       "out_ids", "out_ends", "out_doc_tokens", "out_piece_ends")]
                + [(name, ctypes.c_uint32) for name in ("n", "segments", "docs", "max_blocks")]
                + [("counters", ctypes.c_uint32 * 16)])


COUNTERS = ("n", "segments", "docs", "want_pieces", "flags", "pieces", "tokens", "chars")


def _address(a: np.ndarray) -> int:
    return a.ctypes.data


class EmulatedBackend:
    """Runs the device pipeline on this CPU, `max_blocks` blocks a kernel (grid-stride loops
    cover the rest, so a small grid exercises the same code as a full one)."""

    def __init__(self, tables: _native.GpuTables, max_blocks: int = 2, lib: ctypes.CDLL | None = None):
        self.tables, self.max_blocks = tables, max_blocks
        self._view = tables.view  # the Tables struct; keeps pointing into `tables`
        self._lib = lib or library()

    def run(self, core: _native.TokenizerCore, policy: _native.SpecialPolicy, texts: list[str],
            ends: bool = True, pieces: bool = False) -> dict:
        bad, text, bounds, tokens, docs = _native.gpu_segments(core, policy, texts)
        if bad >= 0:
            return {"disallowed": bad}
        return self.run_segments(text, bounds, tokens, docs, pieces)

    def run_bytes(self, data: bytes) -> dict:
        """One text of raw bytes, valid UTF-8 or not (no Python str can hold the latter)."""
        text = np.frombuffer(data, np.uint8)
        bounds, offsets = np.array([0, len(data)], np.uint32), np.array([0, len(data)], np.uint32)
        return self.run_segments(text, bounds, np.array([0xFFFFFFFF], np.uint32), offsets, True)

    def run_segments(self, text: np.ndarray, bounds: np.ndarray, tokens: np.ndarray, docs: np.ndarray,
                     pieces: bool) -> dict:
        n = len(text)
        if n == 0:
            empty = np.zeros(0, np.uint32)
            return {"disallowed": -1, "flags": 0, "ids": empty, "ends": empty, "chars": 0,
                    "doc_tokens": np.zeros(len(docs), np.uint32), "piece_ends": empty}
        out_ids, out_ends = np.empty(n, np.uint32), np.empty(n, np.uint32)
        out_docs = np.empty(len(docs), np.uint32)
        out_pieces = np.empty(n, np.uint32) if pieces else None
        run = GpuRun(_address(text), _address(bounds), _address(tokens), _address(docs), _address(out_ids),
                     _address(out_ends), _address(out_docs), _address(out_pieces) if pieces else None,
                     n, len(tokens), len(docs) - 1, self.max_blocks)
        if self._lib.host_gpu_tokenize(self._view, ctypes.byref(run)) != 0:
            raise RuntimeError("emulated GPU tokenizer failed (see stderr)")
        c = dict(zip(COUNTERS, run.counters))
        out = {"disallowed": -1, "flags": c["flags"], "ids": out_ids[:c["tokens"]], "ends": out_ends[:c["tokens"]],
               "doc_tokens": out_docs, "chars": c["chars"]}
        if pieces:
            out["piece_ends"] = out_pieces[:c["pieces"]]
        return out
