"""Append-prefill over a paged KV cache: variable-length chunks in one launch.

Sequence ``i`` brings ``q_len`` new tokens (rows ``query_start_loc[i]:query_start_loc[i+1]``)
whose K/V already sit in the cache behind ``seq_lens[i] - q_len`` cached ones; a new
token at absolute position ``p`` sees keys ``0..p``.  A NewPrefill is the case with nothing
cached.  One program handles a tile of a sequence's new tokens for one KV head, with every
query head of that KV head stacked into the tile's rows (row = token * GROUP + head), so
each K/V tile is loaded once for the whole group.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .paged_tile import LOG2E, attend_tile, dot_precision, dot_upcast


@triton.jit
def _prefill_kernel(
    q_ptr, k_ptr, v_ptr, tables_ptr, seq_lens_ptr, query_start_ptr, out_ptr, scale_log2,
    stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_table, stride_ot, stride_oh,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, TILE_TOKENS: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    tile_q = tl.program_id(0)  # the long axis: grid dims 1 and 2 stop at 65535
    seq = tl.program_id(1)
    kv_head = tl.program_id(2)
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    first = tile_q * TILE_TOKENS
    if first < q_len:
        seq_len = tl.load(seq_lens_ptr + seq)
        cached = seq_len - q_len
        r = tl.arange(0, BLOCK_M)
        tok = first + r // GROUP
        heads = kv_head * GROUP + r % GROUP
        row_mask = (r < TILE_TOKENS * GROUP) & (tok < q_len)
        d = tl.arange(0, BLOCK_D)
        d_mask = d < HEAD_DIM
        io_mask = row_mask[:, None] & d_mask[None, :]
        q = tl.load(q_ptr + (q_start + tok)[:, None] * stride_qt + heads[:, None] * stride_qh
                    + d[None, :], mask=io_mask, other=0.0)
        q = q.to(k_ptr.dtype.element_ty)
        q_pos = cached + tok
        table_row = tables_ptr + seq * stride_table
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        # Keys before the tile's first token are visible to every row: no causal mask there.
        # Key 0 is visible to every row, so whichever loop runs first makes every max finite.
        shared_end = (cached + first) // BLOCK_N * BLOCK_N
        for tile in range(0, shared_end, BLOCK_N):
            acc, m, l = attend_tile(acc, m, l, q, q_pos, tile, shared_end, k_ptr, v_ptr, table_row,
                                    kv_head, d, d_mask, stride_kb, stride_ks, stride_kh,
                                    stride_vb, stride_vs, stride_vh, scale_log2,
                                    PAGE, BLOCK_N, False, DOT_PRECISION, UPCAST)
        # The tile's last token sees the most keys; nothing past it is read.
        kv_end = tl.minimum(seq_len, cached + first + TILE_TOKENS)
        for tile in range(shared_end, kv_end, BLOCK_N):
            acc, m, l = attend_tile(acc, m, l, q, q_pos, tile, kv_end, k_ptr, v_ptr, table_row,
                                    kv_head, d, d_mask, stride_kb, stride_ks, stride_kh,
                                    stride_vb, stride_vs, stride_vh, scale_log2,
                                    PAGE, BLOCK_N, True, DOT_PRECISION, UPCAST)
        o = acc / l[:, None]
        tl.store(out_ptr + (q_start + tok)[:, None] * stride_ot + heads[:, None] * stride_oh
                 + d[None, :], o.to(out_ptr.dtype.element_ty), mask=io_mask)


def paged_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  block_tables: torch.Tensor, seq_lens: torch.Tensor,
                  query_start_loc: torch.Tensor, max_query_len: int, scale: float,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of the flattened new tokens ``q`` ``[T, Hq, D]`` (see module docstring)."""
    _, num_heads, head_dim = q.shape
    _, page, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    out = torch.empty_like(q) if out is None else out
    block_m = max(64, triton.next_power_of_2(group))
    # Two K/V tiles per pipeline stage must fit shared memory: narrower tiles for fp32 at 128.
    block_n = 64 if head_dim * q.element_size() <= 256 else 32
    batch = seq_lens.shape[0]
    tile_tokens = block_m // group  # new tokens per program: their query heads fill the rows
    grid = (triton.cdiv(max_query_len, tile_tokens), batch, num_kv_heads)
    _prefill_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, out, scale * LOG2E,
        q.stride(0), q.stride(1),
        *k_cache.stride()[:3], *v_cache.stride()[:3],
        block_tables.stride(0), out.stride(0), out.stride(1),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim), PAGE=page,
        BLOCK_M=block_m, TILE_TOKENS=tile_tokens, BLOCK_N=block_n, DOT_PRECISION=dot_precision(k_cache.dtype),
        UPCAST=dot_upcast(k_cache.dtype),
        num_warps=4, num_stages=2,
    )
    return out
