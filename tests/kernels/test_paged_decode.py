"""The Triton decode kernel against the torch reference (interpreter on CPU)."""
import pytest
import torch

from kernels import DecodeSplit, paged_decode, plan_splits
from paged_case import TOLERANCE, make_case, relative_error

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def run_decode(case, split=None):
    m = case.meta
    return paged_decode(case.q, case.k_cache, case.v_cache, m.block_tables, m.seq_lens,
                        m.max_seq_len, case.scale, out=case.poisoned_out(), split=split)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_decode_matches_reference_in_one_pass_and_split(head_dim, block_size, dtype):
    seq_lens = [1, 37, 300, 130]
    case = make_case(seq_lens, [1] * len(seq_lens), num_heads=8, num_kv_heads=2,
                     head_dim=head_dim, block_size=block_size, dtype=dtype, device=DEVICE)
    exact = case.exact(decode=True)
    one_pass = run_decode(case, DecodeSplit(split_len=320, num_splits=1))
    # 64-token splits: the 300-token context needs five, the 1-token one leaves four unused.
    split = run_decode(case, DecodeSplit(split_len=64, num_splits=5))
    assert relative_error(one_pass, exact) < TOLERANCE[dtype]
    assert relative_error(split, exact) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 2), (3, 3), (6, 2), (16, 2)])
def test_decode_covers_every_query_head_group(num_heads, num_kv_heads):
    case = make_case([90, 17], [1, 1], num_heads, num_kv_heads, head_dim=64, block_size=16,
                     dtype=torch.float32, seed=3, device=DEVICE)
    out = run_decode(case, DecodeSplit(split_len=64, num_splits=2))
    assert relative_error(out, case.exact(decode=True)) < TOLERANCE[torch.float32]


def test_decode_default_plan_matches_reference():
    case = make_case([700, 33], [1, 1], 4, 2, head_dim=64, block_size=16, dtype=torch.float16,
                     seed=4, device=DEVICE)
    assert relative_error(run_decode(case), case.exact(decode=True)) < TOLERANCE[torch.float16]


def test_split_plan_covers_longest_context_in_whole_tiles():
    for batch, max_len in [(1, 1), (1, 131072), (64, 32768), (256, 1000), (3, 257)]:
        plan = plan_splits(batch, 8, max_len, block_n=64, target_programs=528)
        assert plan.split_len % 64 == 0
        assert plan.num_splits * plan.split_len >= max_len > (plan.num_splits - 1) * plan.split_len
        assert 1 <= plan.num_splits <= 64
