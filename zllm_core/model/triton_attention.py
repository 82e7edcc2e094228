"""Paged attention through the Triton kernels: compiled on CUDA, interpreted on CPU
(``TRITON_INTERPRET=1``, set before triton is first imported)."""
from __future__ import annotations

import torch

from zllm_core.model.attention_backend import AttentionBackend, AttentionMetadata

try:
    import zllm_core.kernels as kernels
except ModuleNotFoundError as missing:  # a source checkout: kernels/ sits beside zllm_core/
    if missing.name != "zllm_core.kernels":
        raise
    import kernels


class TritonAttention(AttentionBackend):
    name = "triton"

    def prefill(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        return kernels.paged_prefill(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                                     meta.query_start_loc, meta.max_query_len, scale)

    def decode(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        return kernels.paged_decode(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                                    meta.max_seq_len, scale)
