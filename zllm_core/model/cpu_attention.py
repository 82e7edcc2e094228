"""Paged decode through the native CPU kernel (csrc/paged_decode_cpu.cpp), which reads each
sequence's blocks in place instead of gathering them; prefill, and caches the kernel does
not take, stay on the torch reference."""
from __future__ import annotations

import math

import torch

from zllm_core.model.attention_backend import AttentionMetadata
from zllm_core.model.native_decode import native_entry, pack_operands
from zllm_core.model.torch_attention import TorchAttention

HEAD_DIMS, MAX_GROUP, MAX_PAGE = (64, 128), 16, 256  # what the kernel takes


def fits_kernel(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """float32 CPU operands with unit-stride rows, in the kernel's limits."""
    if not all(t.device.type == "cpu" and t.dtype == torch.float32 and t.stride(-1) == 1
               for t in (q, k_cache, v_cache)):
        return False
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    return (num_heads % num_kv_heads == 0 and num_heads // num_kv_heads <= MAX_GROUP
            and q.shape[2] in HEAD_DIMS and k_cache.shape[1] <= MAX_PAGE)


def cpu_paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """Decode attention of ``q [batch, heads, dim]``; the caller checks ``fits_kernel`` first."""
    out = torch.empty_like(q) if out is None else out
    pointers, sizes, strides = pack_operands(q, k_cache, v_cache, block_tables, seq_lens, out)
    native_entry("paged_decode_cpu")(pointers, sizes, strides, scale * math.log2(math.e),
                                     torch.get_num_threads())
    return out


class CpuAttention(TorchAttention):
    name = "cpu"

    def __init__(self):
        if native_entry("paged_decode_cpu") is None:
            raise RuntimeError("zllm_core._native lacks paged_decode_cpu (rebuild it: make setup)")

    def decode(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if not fits_kernel(q, k_cache, v_cache):
            return super().decode(q, k_cache, v_cache, meta, scale)
        return cpu_paged_decode(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale)
