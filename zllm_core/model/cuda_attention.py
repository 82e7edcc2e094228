"""Paged decode through the CUDA kernel of the native extension (csrc/paged_decode.cu);
prefill, and any decode shape the kernel was not instantiated for, stay on Triton."""
from __future__ import annotations

import torch

from zllm_core.model.attention_backend import AttentionMetadata
from zllm_core.model.native_decode import DTYPE_CODES, native_entry, pack_operands
from zllm_core.model.triton_attention import TritonAttention, kernels

# The template instances the kernel was built with.
HEAD_DIMS = (64, 128)
GROUPS = (1, 2, 4, 8)
SPLIT_STEP = 64  # split lengths are rounded to this many tokens


def native_decode():
    """The extension's ``paged_decode_cuda``, or None when it was built without CUDA."""
    return native_entry("paged_decode_cuda")


def fits_kernel(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether every operand matches an instantiated kernel and allows 16-byte vector loads."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    if not (q.dtype == k_cache.dtype == v_cache.dtype and q.dtype in DTYPE_CODES):
        return False
    if head_dim not in HEAD_DIMS or num_heads // k_cache.shape[2] not in GROUPS:
        return False
    vec = 16 // q.element_size()
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0
               and all(s % vec == 0 for s in t.stride()[:-1]) for t in (q, k_cache, v_cache))


def cuda_paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      block_tables: torch.Tensor, seq_lens: torch.Tensor, max_seq_len: int,
                      scale: float, out: torch.Tensor | None = None,
                      split: kernels.DecodeSplit | None = None) -> torch.Tensor:
    """``kernels.paged_decode`` on the CUDA kernel; the caller checks ``fits_kernel`` first."""
    batch, num_heads, head_dim = q.shape
    split = split or kernels.plan_splits(batch, k_cache.shape[2], max_seq_len, SPLIT_STEP,
                                         kernels.target_programs(q.device))
    out = torch.empty_like(q) if out is None else out
    rows = batch * num_heads * split.num_splits if split.num_splits > 1 else 0
    part_acc = torch.empty(rows, head_dim, dtype=torch.float32, device=q.device)
    part_ml = torch.empty(rows, 2, dtype=torch.float32, device=q.device)
    assert out.data_ptr() % 16 == 0
    native_decode()(*pack_operands(q, k_cache, v_cache, block_tables, seq_lens, out, part_acc, part_ml,
                                   split.split_len, split.num_splits),
                    scale * kernels.LOG2E, torch.cuda.current_stream(q.device).cuda_stream)
    return out


class CudaAttention(TritonAttention):
    name = "cuda"

    def __init__(self):
        if native_decode() is None:
            raise RuntimeError("zllm_core._native was built without CUDA (no nvcc at build time)")

    def decode(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if not fits_kernel(q, k_cache, v_cache):
            return super().decode(q, k_cache, v_cache, meta, scale)
        return cuda_paged_decode(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                                 meta.max_seq_len, scale)
