"""Flash-decoding over a paged KV cache: one query token per sequence.

Pass 1 runs one program per (sequence, KV head, context split).  The query heads that
share a KV head are the rows of one tile (GQA), so each K/V tile is read from memory once
per group, not once per query head.  With one split it writes the normalised output;
otherwise it writes an unnormalised fp32 partial plus its running max and sum, and pass 2
merges the splits of each (sequence, query head).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .paged_tile import LOG2E, attend_tile, dot_precision, dot_upcast


@dataclass(frozen=True)
class DecodeSplit:
    """How pass 1 cuts each context: ``split_len`` tokens per program, ``num_splits`` programs."""

    split_len: int
    num_splits: int


def plan_splits(batch: int, num_kv_heads: int, max_seq_len: int, block_n: int,
                target_programs: int, max_splits: int = 64, min_split_len: int = 256) -> DecodeSplit:
    """Enough splits to fill ``target_programs``, none shorter than ``min_split_len`` tokens."""
    wanted = max(1, -(-target_programs // (batch * num_kv_heads)))
    longest = max(1, -(-max_seq_len // min_split_len))
    splits = min(wanted, longest, max_splits)
    split_len = -(-max_seq_len // splits)
    split_len = -(-split_len // block_n) * block_n
    return DecodeSplit(split_len, -(-max_seq_len // split_len))


@triton.jit
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, tables_ptr, seq_lens_ptr, out_ptr, part_acc_ptr, part_ml_ptr,
    scale_log2, split_len, num_splits,
    stride_qb, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_table, stride_ob, stride_oh,
    NUM_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
    ONE_SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    start = split * split_len
    if start < seq_len:
        end = tl.minimum(start + split_len, seq_len)
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, BLOCK_D)
        heads = kv_head * GROUP + g
        g_mask = g < GROUP
        d_mask = d < HEAD_DIM
        q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + d[None, :],
                    mask=g_mask[:, None] & d_mask[None, :], other=0.0)
        q = q.to(k_ptr.dtype.element_ty)
        table_row = tables_ptr + seq * stride_table
        m = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
        for tile in range(start, end, BLOCK_N):
            # Decode is not causal within the context; ``g`` only fills the q_pos slot.
            acc, m, l = attend_tile(acc, m, l, q, g, tile, end, k_ptr, v_ptr, table_row,
                                    kv_head, d, d_mask, stride_kb, stride_ks, stride_kh,
                                    stride_vb, stride_vs, stride_vh, scale_log2,
                                    PAGE, BLOCK_N, False, DOT_PRECISION, UPCAST)
        if ONE_SPLIT:
            o = acc / l[:, None]
            tl.store(out_ptr + seq * stride_ob + heads[:, None] * stride_oh + d[None, :],
                     o.to(out_ptr.dtype.element_ty), mask=g_mask[:, None] & d_mask[None, :])
        else:
            row = (seq * NUM_HEADS + heads) * num_splits + split
            tl.store(part_acc_ptr + row[:, None] * HEAD_DIM + d[None, :], acc,
                     mask=g_mask[:, None] & d_mask[None, :])
            tl.store(part_ml_ptr + row * 2, m, mask=g_mask)
            tl.store(part_ml_ptr + row * 2 + 1, l, mask=g_mask)


@triton.jit
def _decode_merge_kernel(
    part_acc_ptr, part_ml_ptr, seq_lens_ptr, out_ptr, split_len, num_splits,
    stride_ob, stride_oh,
    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    used = tl.cdiv(tl.load(seq_lens_ptr + seq), split_len)  # splits that saw >= 1 token
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    s_mask = s < used
    d_mask = d < HEAD_DIM
    row = (seq * NUM_HEADS + head) * num_splits + s
    m = tl.load(part_ml_ptr + row * 2, mask=s_mask, other=float("-inf"))
    l = tl.load(part_ml_ptr + row * 2 + 1, mask=s_mask, other=0.0)
    weight = tl.exp2(m - tl.max(m, 0))
    acc = tl.load(part_acc_ptr + row[:, None] * HEAD_DIM + d[None, :],
                  mask=s_mask[:, None] & d_mask[None, :], other=0.0)
    o = tl.sum(acc * weight[:, None], 0) / tl.sum(l * weight, 0)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + d, o.to(out_ptr.dtype.element_ty),
             mask=d_mask)


def target_programs(device: torch.device) -> int:
    """Eight programs per SM: several waves, so the last one leaves few SMs idle."""
    if device.type == "cuda":
        return 8 * torch.cuda.get_device_properties(device).multi_processor_count
    return 1


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, seq_lens: torch.Tensor, max_seq_len: int,
                 scale: float, out: torch.Tensor | None = None,
                 split: DecodeSplit | None = None) -> torch.Tensor:
    """Attention of ``q`` ``[B, Hq, D]`` over each sequence's ``seq_lens[i]`` cached tokens.

    ``split`` overrides the split plan (tests use it to exercise both passes on CPU).
    """
    batch, num_heads, head_dim = q.shape
    _, page, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    out = torch.empty_like(q) if out is None else out
    block_n = 64 if head_dim <= 128 else 32
    split = split or plan_splits(batch, num_kv_heads, max_seq_len, block_n, target_programs(q.device))
    one = split.num_splits == 1
    if one:
        part_acc = part_ml = out  # unused by the one-split variant
    else:
        rows = batch * num_heads * split.num_splits
        part_acc = torch.empty(rows, head_dim, dtype=torch.float32, device=q.device)
        part_ml = torch.empty(rows, 2, dtype=torch.float32, device=q.device)
    block_d = triton.next_power_of_2(head_dim)
    _decode_split_kernel[(batch, num_kv_heads, split.num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens, out, part_acc, part_ml,
        scale * LOG2E, split.split_len, split.num_splits,
        q.stride(0), q.stride(1),
        *k_cache.stride()[:3], *v_cache.stride()[:3],
        block_tables.stride(0), out.stride(0), out.stride(1),
        NUM_HEADS=num_heads, GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim, BLOCK_D=block_d, PAGE=page, BLOCK_N=block_n,
        ONE_SPLIT=one, DOT_PRECISION=dot_precision(k_cache.dtype),
        UPCAST=dot_upcast(k_cache.dtype),
        num_warps=4, num_stages=3,  # the block-table load and the K/V gather it feeds
    )
    if not one:
        _decode_merge_kernel[(batch, num_heads)](
            part_acc, part_ml, seq_lens, out, split.split_len, split.num_splits,
            out.stride(0), out.stride(1),
            NUM_HEADS=num_heads, HEAD_DIM=head_dim, BLOCK_D=block_d,
            BLOCK_S=triton.next_power_of_2(split.num_splits), num_warps=4,
        )
    return out

