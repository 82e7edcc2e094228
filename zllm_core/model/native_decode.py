"""The operands of the native paged attention kernels (csrc/paged_decode_binding.cpp), packed
once for all: raw pointers, sizes and element strides, so the extension needs no libtorch."""
from __future__ import annotations

from typing import Callable, Optional

import torch

# The kernels' KvDtype codes.
DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def native_entry(name: str) -> Optional[Callable]:
    """``zllm_core._native.<name>``, or None when the extension lacks it (or is not built)."""
    try:
        from zllm_core import _native
    except ImportError:
        return None
    return getattr(_native, name, None)


def pack_operands(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  block_tables: torch.Tensor, seq_lens: torch.Tensor, out: torch.Tensor,
                  part_acc: Optional[torch.Tensor] = None, part_ml: Optional[torch.Tensor] = None,
                  split_len: int = 0, num_splits: int = 1) -> tuple[tuple, tuple, tuple]:
    """``(pointers, sizes, strides)`` in the binding's field order; q and out ``[rows, heads, dim]``
    (one row per sequence to decode, one per token to prefill); batch is ``len(seq_lens)``."""
    batch, (_, num_heads, head_dim) = seq_lens.shape[0], q.shape
    _, page, num_kv_heads, _ = k_cache.shape
    assert block_tables.dtype == seq_lens.dtype == torch.int32 and block_tables.stride(1) == 1
    assert seq_lens.is_contiguous() and out.stride(-1) == 1
    pointers = (q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), block_tables.data_ptr(),
                seq_lens.data_ptr(), out.data_ptr(),
                0 if part_acc is None else part_acc.data_ptr(), 0 if part_ml is None else part_ml.data_ptr())
    sizes = (DTYPE_CODES[q.dtype], batch, num_heads, num_kv_heads, head_dim, page, split_len, num_splits)
    strides = (*q.stride()[:2], *k_cache.stride()[:3], *v_cache.stride()[:3], block_tables.stride(0),
               *out.stride()[:2])
    return pointers, sizes, strides
