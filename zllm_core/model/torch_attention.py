"""Torch reference paged attention: exact, readable, and the oracle every kernel is tested against."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zllm_core.model.attention_backend import AttentionBackend, AttentionMetadata


def gather_context(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first ``length`` cached rows of one sequence as ``[length, kv_heads, head_dim]``."""
    n_blocks = -(-length // cache.shape[1])
    return cache[block_table[:n_blocks].long()].flatten(0, 1)[:length]


def _causal_mask(q_len: int, seq_len: int, device: torch.device) -> torch.Tensor | None:
    """Query j sits at absolute position seq_len - q_len + j and sees keys <= it.

    ``None`` for a chunk with no cached context: plain causal attention, SDPA's fast path."""
    if q_len == seq_len:
        return None
    q_pos = torch.arange(seq_len - q_len, seq_len, device=device)
    return (torch.arange(seq_len, device=device)[None, :] <= q_pos[:, None])[None, None]


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
          scale: float, causal: bool = False) -> torch.Tensor:
    """q ``[B, Hq, Lq, D]``, k/v ``[B, Hkv, Lk, D]``; query heads share their KV head (GQA)
    without materialising repeated K/V; fp32 math."""
    out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, scale=scale,
                                         is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
    return out.to(q.dtype)


class TorchAttention(AttentionBackend):
    name = "torch"

    def prefill(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        out = torch.empty_like(q)
        starts = meta.query_start_loc.tolist()
        lens = meta.seq_lens.tolist()
        for i, seq_len in enumerate(lens):
            lo, hi = starts[i], starts[i + 1]
            q_len = hi - lo
            k = gather_context(k_cache, meta.block_tables[i], seq_len)
            v = gather_context(v_cache, meta.block_tables[i], seq_len)
            mask = _causal_mask(q_len, seq_len, q.device)
            o = _sdpa(q[lo:hi].transpose(0, 1)[None], k.transpose(0, 1)[None],
                      v.transpose(0, 1)[None], mask, scale, causal=mask is None)
            out[lo:hi] = o[0].transpose(0, 1)
        return out

    def decode(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        # Batched: gather every sequence's blocks, pad to the longest, mask the padding.
        bs = k_cache.shape[1]
        max_blocks = -(-meta.max_seq_len // bs)
        tables = meta.block_tables[:, :max_blocks].long()
        k = k_cache[tables].flatten(1, 2)  # [B, L, Hkv, D]
        v = v_cache[tables].flatten(1, 2)
        valid = torch.arange(k.shape[1], device=q.device)[None, :] < meta.seq_lens[:, None]
        o = _sdpa(q[:, :, None, :], k.transpose(1, 2), v.transpose(1, 2), valid[:, None, None, :], scale)
        return o[:, :, 0, :]
