"""Torch reference paged attention: exact, readable, and the oracle every kernel is tested against."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zllm_core.model.attention_backend import AttentionBackend, AttentionMetadata


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


def _gather(cache: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """Blocks ``[B, n]`` of ``cache [blocks, block_size, Hkv, D]`` -> ``[B, n * block_size, Hkv, D]``.
    index_select, not ``cache[tables]``: on CPU it copies the same rows about 5x faster."""
    return cache.index_select(0, tables.reshape(-1)).view(tables.shape[0], -1, *cache.shape[2:])


class TorchAttention(AttentionBackend):
    name = "torch"

    def prefill(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        # Chunks of the same shape (query length, context length) run as one batched call:
        # same mask, no padding, so batching changes nothing but the number of launches.
        out = torch.empty_like(q)
        starts = meta.query_start_loc.tolist()
        groups: dict[tuple[int, int], list[int]] = {}
        for i, seq_len in enumerate(meta.seq_lens.tolist()):
            groups.setdefault((starts[i + 1] - starts[i], seq_len), []).append(i)
        for (q_len, seq_len), rows in groups.items():
            tables = meta.block_tables[rows, :-(-seq_len // k_cache.shape[1])].long()
            k = _gather(k_cache, tables)[:, :seq_len].transpose(1, 2)  # [G, Hkv, L, D]
            v = _gather(v_cache, tables)[:, :seq_len].transpose(1, 2)
            qi = torch.cat([torch.arange(starts[i], starts[i + 1]) for i in rows]).to(q.device)
            mask = _causal_mask(q_len, seq_len, q.device)
            o = _sdpa(q[qi].view(len(rows), q_len, *q.shape[1:]).transpose(1, 2), k, v, mask, scale,
                      causal=mask is None)
            out[qi] = o.transpose(1, 2).reshape(-1, *q.shape[1:])
        return out

    def decode(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        # Batched: gather every sequence's blocks, pad to the longest, mask the padding.
        bs = k_cache.shape[1]
        max_blocks = -(-meta.max_seq_len // bs)
        tables = meta.block_tables[:, :max_blocks].long()
        k = _gather(k_cache, tables)  # [B, L, Hkv, D]
        v = _gather(v_cache, tables)
        valid = torch.arange(k.shape[1], device=q.device)[None, :] < meta.seq_lens[:, None]
        o = _sdpa(q[:, :, None, :], k.transpose(1, 2), v.transpose(1, 2), valid[:, None, None, :], scale)
        return o[:, :, 0, :]
