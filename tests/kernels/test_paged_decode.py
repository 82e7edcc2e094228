"""The decode kernels (Triton; the native CPU kernel; CUDA where built and a GPU exists)
against the torch reference."""
import pytest
import torch

from paged_case import DEVICE, TOLERANCE, make_case, on_threads, relative_error
from zllm_core.model import cpu_attention
from zllm_core.model.cuda_attention import cuda_paged_decode, fits_kernel, native_decode
from zllm_core.model.triton_attention import kernels

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(params=["triton", "cpu", "cuda"])
def decode(request):
    if request.param == "triton":
        return kernels.paged_decode
    if request.param == "cpu":
        return cpu_attention.cpu_paged_decode
    if DEVICE != "cuda" or native_decode() is None:
        pytest.skip("the CUDA kernel needs a GPU and an extension built with nvcc")
    return cuda_paged_decode


def run_decode(decode, case, split=None):
    if decode is cuda_paged_decode and not fits_kernel(case.q, case.k_cache, case.v_cache):
        pytest.skip("shape not instantiated in the CUDA kernel (served by Triton)")
    m = case.meta
    if decode is cpu_attention.cpu_paged_decode:
        # One pass over the blocks, nothing to split; other dtypes stay on the torch reference.
        if case.q.device.type != "cpu" or not cpu_attention.fits_kernel(case.q, case.k_cache, case.v_cache):
            pytest.skip("the CPU kernel takes float32 CPU tensors (others use the torch reference)")
        return decode(case.q, case.k_cache, case.v_cache, m.block_tables, m.seq_lens, case.scale,
                      out=case.poisoned_out())
    return decode(case.q, case.k_cache, case.v_cache, m.block_tables, m.seq_lens,
                  m.max_seq_len, case.scale, out=case.poisoned_out(), split=split)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_decode_matches_reference_in_one_pass_and_split(decode, head_dim, block_size, dtype):
    seq_lens = [1, 37, 300, 130]
    case = make_case(seq_lens, [1] * len(seq_lens), num_heads=8, num_kv_heads=2,
                     head_dim=head_dim, block_size=block_size, dtype=dtype)
    exact = case.exact(decode=True)
    one_pass = run_decode(decode, case, kernels.DecodeSplit(split_len=320, num_splits=1))
    # 64-token splits: the 300-token context needs five, the 1-token one leaves four unused.
    split = run_decode(decode, case, kernels.DecodeSplit(split_len=64, num_splits=5))
    assert relative_error(one_pass, exact) < TOLERANCE[dtype]
    assert relative_error(split, exact) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 2), (3, 3), (6, 2), (16, 2)])
def test_decode_covers_every_query_head_group(decode, num_heads, num_kv_heads):
    case = make_case([90, 17], [1, 1], num_heads, num_kv_heads, head_dim=64, block_size=16,
                     dtype=torch.float32, seed=3)
    out = run_decode(decode, case, kernels.DecodeSplit(split_len=64, num_splits=2))
    assert relative_error(out, case.exact(decode=True)) < TOLERANCE[torch.float32]


def test_decode_default_plan_matches_reference(decode):
    case = make_case([700, 33], [1, 1], 4, 2, head_dim=64, block_size=16, dtype=torch.float16,
                     seed=4)
    assert relative_error(run_decode(decode, case), case.exact(decode=True)) < TOLERANCE[torch.float16]


def test_split_plan_covers_longest_context_in_whole_tiles():
    for batch, max_len in [(1, 1), (1, 131072), (64, 32768), (256, 1000), (3, 257)]:
        plan = kernels.plan_splits(batch, 8, max_len, block_n=64, target_programs=528)
        assert plan.split_len % 64 == 0
        assert plan.num_splits * plan.split_len >= max_len > (plan.num_splits - 1) * plan.split_len
        assert 1 <= plan.num_splits <= 64


@pytest.mark.parametrize("threads", [1, 2, 7])
def test_cpu_kernel_answers_alike_on_any_number_of_threads(threads):
    """Items are split across threads whole, so the bits cannot depend on the split; an empty
    sequence attends to nothing (zeros), and rows past a sequence's length are never read."""
    if DEVICE != "cpu":
        pytest.skip("a CPU test")
    case = make_case([0, 1, 15, 16, 17, 2049, 600], [1] * 7, num_heads=12, num_kv_heads=4,
                     head_dim=128, block_size=16, dtype=torch.float32, seed=9)
    m = case.meta
    outs = [on_threads(n, lambda: cpu_attention.cpu_paged_decode(case.q, case.k_cache, case.v_cache, m.block_tables,
                                                                 m.seq_lens, case.scale, out=case.poisoned_out()))
            for n in (1, threads)]
    assert torch.equal(outs[0], outs[1])
    assert torch.equal(outs[0][0], torch.zeros_like(outs[0][0]))
    assert relative_error(outs[0][1:], case.exact(decode=True)[1:]) < TOLERANCE[torch.float32]


def test_cpu_kernel_refuses_what_it_was_not_built_for():
    case = make_case([40], [1], num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                     dtype=torch.float32, device="cpu")
    m = case.meta
    with pytest.raises(ValueError, match="head_dim must be 64 or 128"):
        q = torch.zeros(1, 4, 80)
        k = torch.zeros(case.k_cache.shape[0], 16, 2, 80)
        cpu_attention.cpu_paged_decode(q, k, k, m.block_tables, m.seq_lens, 0.1)
    with pytest.raises(ValueError, match="float32"):
        cpu_attention.cpu_paged_decode(case.q.half(), case.k_cache.half(), case.v_cache.half(),
                                       m.block_tables, m.seq_lens, 0.1)
