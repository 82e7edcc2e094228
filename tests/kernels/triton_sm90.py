"""Compile the Triton kernels for sm_90 ahead of time on a machine without a GPU.

Run as a script (the interpreter must be off, so not inside the test process): the real
launchers are called on small CPU tensors with ``JITFunction.run`` swapped for a recorder,
and every launch they would make is handed to Triton's compiler for an H100/H200 target.
Exits non-zero on the first kernel that does not compile.
"""
import os
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from paged_case import make_case  # noqa: E402
from zllm_core.model.triton_attention import kernels  # noqa: E402

TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int32: "i32",
         torch.int64: "i64"}
OPTIONS = ("num_warps", "num_stages")


def launches(run_launcher) -> list:
    """(kernel, args, kwargs) of every launch ``run_launcher`` makes."""
    seen = []
    real = JITFunction.run
    JITFunction.run = lambda self, *args, grid, warmup, **kwargs: seen.append((self, args, kwargs))
    try:
        run_launcher()
    finally:
        JITFunction.run = real
    return seen


def arg_type(value) -> str:
    if isinstance(value, torch.Tensor):
        return "*" + TYPES[value.dtype]
    if isinstance(value, float):
        return "fp32"
    return "i32" if -2**31 <= value < 2**31 else "i64"


def compile_sm90(fn: JITFunction, args: tuple, kwargs: dict):
    runtime = dict(zip(fn.arg_names, args))
    signature = {name: arg_type(runtime[name]) if name in runtime else "constexpr" for name in fn.arg_names}
    constexprs = {name: kwargs[name] for name in fn.arg_names if name not in runtime}
    options = {k: kwargs[k] for k in OPTIONS if k in kwargs}
    return triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                          options=options)


def decode(head_dim, block_size, dtype, splits):
    case = make_case([40, 200], [1, 1], 8, 2, head_dim, block_size, dtype, device="cpu")
    m = case.meta
    split = kernels.DecodeSplit(split_len=256 // splits, num_splits=splits)
    return lambda: kernels.paged_decode(case.q, case.k_cache, case.v_cache, m.block_tables,
                                        m.seq_lens, m.max_seq_len, case.scale, split=split)


def prefill(head_dim, block_size, dtype):
    case = make_case([40, 200], [40, 30], 8, 2, head_dim, block_size, dtype, device="cpu")
    m = case.meta
    return lambda: kernels.paged_prefill(case.q, case.k_cache, case.v_cache, m.block_tables,
                                         m.seq_lens, m.query_start_loc, m.max_query_len, case.scale)


def token_bitmask(dtype, fenced_rows):
    logits = torch.zeros(4, 151936, dtype=dtype)
    bitmask = torch.zeros(len(fenced_rows) if fenced_rows else 4, 4748, dtype=torch.int32)
    rows = torch.tensor(fenced_rows) if fenced_rows else None
    return lambda: kernels.apply_token_bitmask(logits, bitmask, rows, 151669)


# The production shape (bf16, head_dim 128) on the split path, and the fp32 ("ieee") path.
LAUNCHERS = {
    "decode bf16 d128 split": decode(128, 16, torch.bfloat16, splits=2),
    "decode fp32 d64 one pass": decode(64, 32, torch.float32, splits=1),
    "prefill bf16 d128": prefill(128, 16, torch.bfloat16),
    "prefill fp32 d64": prefill(64, 32, torch.float32),
    "token bitmask fp32 rows": token_bitmask(torch.float32, [3, 0]),
    "token bitmask bf16 every row": token_bitmask(torch.bfloat16, None),
}

if __name__ == "__main__":
    for label, launcher in LAUNCHERS.items():
        for fn, args, kwargs in launches(launcher):
            compiled = compile_sm90(fn, args, kwargs)
            print(f"{label}: {fn.__name__} -> sm_90 cubin, {compiled.metadata.shared} B shared", flush=True)
