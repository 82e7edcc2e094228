"""The Triton append-prefill kernel against the torch reference (interpreter on CPU)."""
import pytest
import torch

from paged_case import TOLERANCE, make_case, relative_error
from zllm_core.model.triton_attention import kernels

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def run_prefill(case):
    m = case.meta
    return kernels.paged_prefill(case.q, case.k_cache, case.v_cache, m.block_tables, m.seq_lens,
                         m.query_start_loc, m.max_query_len, case.scale, out=case.poisoned_out())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_new_and_append_prefill_share_one_launch(head_dim, block_size, dtype):
    # A NewPrefill (nothing cached), AppendPrefills with short and page-straddling chunks
    # (70 tokens span three query tiles), and a one-token chunk, all in one batch.
    seq_lens = [45, 150, 100, 9]
    query_lens = [45, 70, 3, 1]
    case = make_case(seq_lens, query_lens, num_heads=8, num_kv_heads=2, head_dim=head_dim,
                     block_size=block_size, dtype=dtype, seed=1)
    assert relative_error(run_prefill(case), case.exact(decode=False)) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 2), (3, 3), (6, 2), (16, 2)])
def test_prefill_covers_every_query_head_group(num_heads, num_kv_heads):
    case = make_case([40, 66], [40, 25], num_heads, num_kv_heads, head_dim=64, block_size=16,
                     dtype=torch.float32, seed=2)
    assert relative_error(run_prefill(case), case.exact(decode=False)) < TOLERANCE[torch.float32]
