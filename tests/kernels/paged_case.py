"""Random paged-attention problems for the kernel tests: scattered blocks, ragged lengths,
poisoned outputs so an element a kernel forgets to write shows up as NaN."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from zllm_core.model.attention_backend import AttentionMetadata
from zllm_core.model.torch_attention import TorchAttention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class PagedCase:
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    meta: AttentionMetadata
    scale: float

    def poisoned_out(self) -> torch.Tensor:
        return torch.full_like(self.q, float("nan"))

    def exact(self, decode: bool) -> torch.Tensor:
        """The torch reference on fp32 copies of the inputs: the answer before any rounding."""
        ref = TorchAttention()
        run = ref.decode if decode else ref.prefill
        return run(self.q.float(), self.k_cache.float(), self.v_cache.float(), self.meta, self.scale)


def make_case(seq_lens: list[int], query_lens: list[int], num_heads: int, num_kv_heads: int,
              head_dim: int, block_size: int, dtype: torch.dtype, seed: int = 0,
              device: str = DEVICE) -> PagedCase:
    """Sequence ``i`` holds ``seq_lens[i]`` tokens, the last ``query_lens[i]`` of them new.

    Blocks are handed out in a random order from a pool with spare blocks, and the padding
    of ``block_tables`` points at a real block, so a kernel that reads past a sequence's
    length or trusts block order gets a wrong answer rather than a lucky one.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + 3
    max_blocks = max(blocks_per_seq) + 1
    order = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    tables = torch.zeros(len(seq_lens), max_blocks, dtype=torch.int32)
    taken = 0
    for i, n in enumerate(blocks_per_seq):
        tables[i, :n] = order[taken:taken + n]
        taken += n
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(dtype)
    v_cache = torch.randn(shape, generator=gen).to(dtype)
    starts = torch.tensor([0] + query_lens).cumsum(0).to(torch.int32)
    q = torch.randn(int(starts[-1]), num_heads, head_dim, generator=gen).to(dtype)
    meta = AttentionMetadata(
        query_start_loc=starts.to(device), seq_lens=torch.tensor(seq_lens, dtype=torch.int32).to(device),
        block_tables=tables.to(device), slot_mapping=torch.zeros(0, dtype=torch.int64, device=device),
        max_query_len=max(query_lens), max_seq_len=max(seq_lens))
    return PagedCase(q.to(device), k_cache.to(device), v_cache.to(device), meta, head_dim ** -0.5)


TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest absolute error over the largest reference magnitude (NaN-propagating)."""
    err = (out.float() - ref.float()).abs().max()
    return float(err / ref.float().abs().max())


def on_threads(n: int, run):
    """``run()`` with torch, and so the CPU kernels, on ``n`` threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return run()
    finally:
        torch.set_num_threads(before)
