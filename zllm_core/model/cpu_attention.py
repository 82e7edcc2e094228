"""Paged attention through the native CPU kernels (csrc/paged_decode_cpu.cpp,
csrc/paged_prefill_cpu.cpp), which read each sequence's blocks in place instead of
gathering them; caches the kernels do not take stay on the torch reference.

The prefill kernel computes each query row with the decode kernel's arithmetic, so a mixed
step (decodes and prefill chunks) runs as one prefill call and every decode in it gets the
bits it would get alone.  Long chunks over long contexts stay on the torch reference: there
the gather is paid once for many queries, and SDPA's matrix products (with fused
multiply-adds, which the kernels forgo so that every CPU variant rounds alike) outrun the
kernel (bench/RESULTS.md, issue 20).  Which path a chunk takes depends on its own shape
only, never on what else shares the step."""
from __future__ import annotations

import math

import torch

from zllm_core.model.attention_backend import AttentionMetadata
from zllm_core.model.native_decode import native_entry, pack_operands
from zllm_core.model.torch_attention import TorchAttention

HEAD_DIMS, MAX_GROUP, MAX_PAGE = (64, 128), 16, 256  # what the kernels take
# A chunk of at least this many tokens over at least this many keys runs faster in SDPA.
SDPA_MIN_QUERY, SDPA_MIN_KEYS = 128, 2048


def fits_kernel(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """float32 CPU operands with unit-stride rows, in the kernels' limits."""
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


def cpu_paged_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      block_tables: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                      scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of the chunks ``q [num_tokens, heads, dim]`` (sequence ``i`` owns rows
    ``query_start_loc[i]:query_start_loc[i + 1]``, its last positions) over their cached
    context and causally over themselves; the caller checks ``fits_kernel`` first."""
    out = torch.empty_like(q) if out is None else out
    assert query_start_loc.dtype == torch.int32 and query_start_loc.is_contiguous()
    pointers, sizes, strides = pack_operands(q, k_cache, v_cache, block_tables, seq_lens, out)
    native_entry("paged_prefill_cpu")(pointers, sizes, strides, query_start_loc.data_ptr(), q.shape[0],
                                      scale * math.log2(math.e), torch.get_num_threads())
    return out


def subset(meta: AttentionMetadata, chunks: torch.Tensor) -> tuple[torch.Tensor, AttentionMetadata]:
    """The query rows of the chunks that the mask ``chunks`` selects, and their metadata."""
    lengths = meta.query_start_loc.diff()[chunks]
    query_start_loc = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    query_start_loc[1:] = lengths.cumsum(0)
    shift = meta.query_start_loc[:-1][chunks] - query_start_loc[:-1]
    rows = torch.arange(int(query_start_loc[-1])) + shift.repeat_interleave(lengths)
    seq_lens = meta.seq_lens[chunks]
    part = AttentionMetadata(query_start_loc, seq_lens, meta.block_tables[chunks], meta.slot_mapping[:0],
                             int(lengths.max()), int(seq_lens.max()))
    return rows, part


class CpuAttention(TorchAttention):
    name = "cpu"

    def __init__(self):
        if native_entry("paged_prefill_cpu") is None:
            raise RuntimeError("zllm_core._native lacks the CPU attention kernels (rebuild it: make setup)")

    def prefill(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if not fits_kernel(q, k_cache, v_cache):
            return super().prefill(q, k_cache, v_cache, meta, scale)
        if meta.max_query_len < SDPA_MIN_QUERY or meta.max_seq_len < SDPA_MIN_KEYS:
            return self._kernel_prefill(q, k_cache, v_cache, meta, scale)
        long = (meta.query_start_loc.diff() >= SDPA_MIN_QUERY) & (meta.seq_lens >= SDPA_MIN_KEYS)
        out = torch.empty_like(q)
        for chunks, run in ((long, super().prefill), (~long, self._kernel_prefill)):
            if chunks.any():
                rows, part = subset(meta, chunks)
                out[rows] = run(q[rows], k_cache, v_cache, part, scale)
        return out

    @staticmethod
    def _kernel_prefill(q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        return cpu_paged_prefill(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, meta.query_start_loc, scale)

    def decode(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if not fits_kernel(q, k_cache, v_cache):
            return super().decode(q, k_cache, v_cache, meta, scale)
        return cpu_paged_decode(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale)

    def mixed(self, q, k_cache, v_cache, meta: AttentionMetadata, split, scale: float) -> torch.Tensor:
        if not fits_kernel(q, k_cache, v_cache):
            return super().mixed(q, k_cache, v_cache, meta, split, scale)
        return self.prefill(q, k_cache, v_cache, meta, scale)
