"""The CUDA decode kernel's own source, compiled for the CPU with SIMT stand-ins (each CUDA
thread a fiber, warps in lockstep), against the torch reference.  This checks the kernel's
indexing, GQA grouping, shuffles and split merging on machines without a GPU; the same
tests in test_paged_decode.py run the compiled kernel where a GPU exists."""
import ctypes

import pytest
import torch

from paged_case import TOLERANCE, make_case, relative_error
from simt_build import host_library
from zllm_core.model.cuda_attention import DTYPE_CODES
from zllm_core.model.triton_attention import kernels



class Args(ctypes.Structure):
    """zllm::PagedDecodeArgs (csrc/paged_decode.h), field for field."""

    _fields_ = ([(n, ctypes.c_void_p) for n in
                 ("q", "k", "v", "tables", "seq_lens", "out", "part_acc", "part_ml")]
                + [(n, ctypes.c_int) for n in ("dtype", "batch", "num_heads", "num_kv_heads",
                                               "head_dim", "page_size", "split_len", "num_splits")]
                + [("scale_log2", ctypes.c_float)]
                + [(f"stride{i}", ctypes.c_int64) for i in range(11)])


@pytest.fixture(scope="module")
def host_decode(tmp_path_factory):
    entry = host_library(tmp_path_factory, "cuda_decode_host.cpp").host_paged_decode

    def decode(case, split):
        q, k, v, m = case.q, case.k_cache, case.v_cache, case.meta
        batch, heads, dim = q.shape
        out = case.poisoned_out()
        rows = batch * heads * split.num_splits
        part_acc = torch.full((rows, dim), float("nan"))
        part_ml = torch.full((rows, 2), float("nan"))
        args = Args(q.data_ptr(), k.data_ptr(), v.data_ptr(), m.block_tables.data_ptr(),
                    m.seq_lens.data_ptr(), out.data_ptr(), part_acc.data_ptr(), part_ml.data_ptr(),
                    DTYPE_CODES[q.dtype], batch, heads, k.shape[2], dim, k.shape[1],
                    split.split_len, split.num_splits, case.scale * kernels.LOG2E,
                    *q.stride()[:2], *k.stride()[:3], *v.stride()[:3], m.block_tables.stride(0),
                    *out.stride()[:2])
        assert entry(ctypes.byref(args)) == 0
        return out
    return decode


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("head_dim,block_size", [(64, 16), (128, 32), (64, 32), (128, 16)])
def test_host_built_cuda_decode_matches_reference(host_decode, head_dim, block_size, dtype):
    case = make_case([1, 37, 300, 130], [1] * 4, num_heads=8, num_kv_heads=2, head_dim=head_dim,
                     block_size=block_size, dtype=dtype, device="cpu", seed=head_dim + block_size)
    exact = case.exact(decode=True)
    for split in (kernels.DecodeSplit(320, 1), kernels.DecodeSplit(64, 5)):
        assert relative_error(host_decode(case, split), exact) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_heads,num_kv_heads", [(2, 2), (4, 2), (16, 2)])
def test_host_built_cuda_decode_covers_every_group_instance(host_decode, num_heads, num_kv_heads):
    case = make_case([90, 17], [1, 1], num_heads, num_kv_heads, head_dim=128, block_size=16,
                     dtype=torch.bfloat16, device="cpu", seed=num_heads)
    out = host_decode(case, kernels.DecodeSplit(64, 2))
    assert relative_error(out, case.exact(decode=True)) < TOLERANCE[torch.bfloat16]
