"""Backend selection, and the Triton backend through the model's attention seam."""
import pytest
import torch

from paged_case import DEVICE, TOLERANCE, make_case, relative_error
from zllm_core.model.attention_backend import ForwardContext
from zllm_core.model.backends import select_backend


def test_auto_is_the_native_kernel_on_cpu_and_triton_on_cuda():
    assert select_backend(torch.device("cpu")).name == "cpu"
    if DEVICE == "cuda":
        assert select_backend(torch.device("cuda")).name == "triton"


def test_each_backend_can_be_forced():
    assert select_backend(torch.device(DEVICE), "torch").name == "torch"
    assert select_backend(torch.device(DEVICE), "triton").name == "triton"
    assert select_backend(torch.device("cpu"), "cpu").name == "cpu"


def test_cuda_backend_is_refused_on_cpu_and_unknown_names_everywhere():
    with pytest.raises(ValueError):
        select_backend(torch.device("cpu"), "cuda")
    with pytest.raises(ValueError):
        select_backend(torch.device(DEVICE), "flash")


@pytest.mark.parametrize("backend,dtype", [("triton", torch.bfloat16), ("cuda", torch.bfloat16),
                                           ("cpu", torch.float32), ("cpu", torch.bfloat16)])
def test_backend_attends_like_the_reference_through_the_forward_context(backend, dtype):
    """The demo model's shape (4 query heads, 2 KV heads, head_dim 64): a mixed
    prefill step, then a decode step, each writing its K/V through the context first.
    The CPU kernel takes float32; a bfloat16 cache falls back to the reference."""
    if backend == "cuda" and DEVICE != "cuda":
        pytest.skip("the CUDA backend needs a GPU")
    device = torch.device("cpu" if backend == "cpu" else DEVICE)
    kernel, reference = select_backend(device, backend), select_backend(device, "torch")
    seq_lens = [20, 40, 30]
    for query_lens, seed in [([20, 1, 7], 5), ([1, 1, 1], 6)]:
        case = make_case(seq_lens, query_lens, 4, 2, head_dim=64, block_size=16,
                         dtype=dtype, seed=seed, device=device.type)
        case.meta.slot_mapping = new_token_slots(case.meta.block_tables, seq_lens, query_lens, 16)
        gen = torch.Generator().manual_seed(seed)
        k, v = (torch.randn(sum(query_lens), 2, 64, generator=gen).to(device, dtype) for _ in "kv")
        outs = []
        for chosen in (kernel, reference):
            ctx = ForwardContext(case.meta, [(case.k_cache.clone(), case.v_cache.clone())], chosen)
            outs.append(ctx.attend(0, case.q, k, v, case.scale))
        assert relative_error(outs[0], outs[1]) < TOLERANCE[dtype]


def new_token_slots(tables, seq_lens, query_lens, block_size):
    """Flat cache slots of each sequence's last ``query_lens[i]`` positions."""
    slots = []
    for row, n, q in zip(tables, seq_lens, query_lens):
        pos = torch.arange(n - q, n, device=tables.device)
        slots.append(row[pos // block_size].long() * block_size + pos % block_size)
    return torch.cat(slots)
