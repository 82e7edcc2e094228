"""Shared pieces of the paged-attention kernels: gathering a K/V tile through a block table,
the fp32 online softmax, and attending one K/V tile with both."""
import os

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # scores are kept in base 2 so the kernels can use exp2


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 caches get exact fp32 products; tf32 would cost three decimal digits."""
    return "ieee" if dtype == torch.float32 else "tf32"


def dot_upcast(dtype: torch.dtype) -> bool:
    """Triton's CPU interpreter keeps bf16 as raw uint16 and multiplies the bit patterns
    as integers in ``tl.dot``; upcasting the (already bf16-rounded) operands to fp32 there
    gives exactly what the tensor cores compute: exact products, fp32 accumulation."""
    return dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def mma(a, b, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """``a @ b`` with fp32 accumulation (see ``dot_upcast`` for UPCAST)."""
    if UPCAST:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        c = tl.dot(a, b, input_precision=DOT_PRECISION)
    return c


@triton.jit
def load_kv_tile(cache_ptr, table_row_ptr, pos, valid, kv_head, d, d_mask,
                 stride_block, stride_slot, stride_head, PAGE: tl.constexpr):
    """Rows ``pos`` ([N]) of one KV head as ``[N, BLOCK_D]``; masked rows read as zero.

    Page ids are widened to int64 first: ``page * stride_block`` overflows int32 once a
    pool holds more than 2**31 elements, which a large card reaches easily.
    """
    page = tl.load(table_row_ptr + pos // PAGE, mask=valid, other=0).to(tl.int64)
    offs = page[:, None] * stride_block + (pos % PAGE)[:, None] * stride_slot \
        + kv_head * stride_head + d[None, :]
    return tl.load(cache_ptr + offs, mask=valid[:, None] & d_mask[None, :], other=0.0)


@triton.jit
def online_softmax_step(acc, m, l, s, v, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """Fold a tile of base-2 scores ``s`` ([M, N], fp32, -inf where masked) and its values
    ``v`` ([N, D]) into the running (acc, max, sum); ``m`` must already be finite or the tile
    must hold a visible key in every row."""
    m_new = tl.maximum(m, tl.max(s, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(s - m_new[:, None])
    l = l * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + mma(p.to(v.dtype), v, DOT_PRECISION, UPCAST)
    return acc, m_new, l


@triton.jit
def attend_tile(acc, m, l, q, q_pos, tile, kv_end, k_ptr, v_ptr, table_row, kv_head, d, d_mask,
                stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, scale_log2,
                PAGE: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """Fold keys ``tile .. tile + BLOCK_N`` (those below ``kv_end``) into the running state of
    the query rows ``q``; with CAUSAL a row at absolute position ``q_pos`` sees keys <= it."""
    pos = tile + tl.arange(0, BLOCK_N)
    valid = pos < kv_end
    k = load_kv_tile(k_ptr, table_row, pos, valid, kv_head, d, d_mask,
                     stride_kb, stride_ks, stride_kh, PAGE)
    s = mma(q, tl.trans(k), DOT_PRECISION, UPCAST) * scale_log2
    s = tl.where(valid[None, :], s, float("-inf"))
    if CAUSAL:
        s = tl.where(pos[None, :] <= q_pos[:, None], s, float("-inf"))
    v = load_kv_tile(v_ptr, table_row, pos, valid, kv_head, d, d_mask,
                     stride_vb, stride_vs, stride_vh, PAGE)
    return online_softmax_step(acc, m, l, s, v, DOT_PRECISION, UPCAST)
