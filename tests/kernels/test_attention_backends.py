"""Backend selection, and each backend through the model's attention seam, mixed steps too."""
import pytest
import torch

from paged_case import DEVICE, TOLERANCE, make_case, relative_error
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.scheduler import Batch, Chunk, TaskKind
from zllm_core.engine.sequence import Sequence
from zllm_core.engine.step_inputs import InputBuffers
from zllm_core.model.attention_backend import AttentionBackend, ForwardContext
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


def mixed_step(device, dtype):
    """Three decodes then two prefill chunks (one continuing cached context, one new), built
    by the engine's input buffers; the step's Q, K and V, and a cache."""
    seq_lens, query_lens = [20, 40, 33, 50, 9], [1, 1, 1, 17, 9]
    gen = torch.Generator().manual_seed(11)
    order = torch.randperm(32, generator=gen).tolist()
    seqs, chunks = [], []
    for i, (n, q) in enumerate(zip(seq_lens, query_lens)):
        seq = Sequence(f"s{i}", list(range(n)), SamplingParams(), arrival=i)
        seq.block_table, order = order[:-(-n // 16)], order[-(-n // 16):]
        kind = TaskKind.DECODE if q == 1 else TaskKind.APPEND_PREFILL if q < n else TaskKind.NEW_PREFILL
        chunks.append(Chunk(seq, n - q, q, kind))
    step = InputBuffers(8, 4, 64, 16, device).prepare(Batch(chunks, num_decodes=3))
    assert step.split is not None and step.meta.max_query_len == 17
    shape = (32, 16, 2, 64)
    k_cache, v_cache = (torch.randn(shape, generator=gen).to(device, dtype) for _ in "kv")
    q = torch.randn(sum(query_lens), 4, 64, generator=gen).to(device, dtype)
    k, v = (torch.randn(sum(query_lens), 2, 64, generator=gen).to(device, dtype) for _ in "kv")
    return step, (k_cache, v_cache), (q, k, v)


@pytest.mark.parametrize("backend,dtype", [("triton", torch.bfloat16), ("cuda", torch.bfloat16),
                                           ("cpu", torch.float32), ("torch", torch.float32)])
def test_a_mixed_step_attends_like_the_reference_over_the_whole_batch(backend, dtype):
    if backend == "cuda" and DEVICE != "cuda":
        pytest.skip("the CUDA backend needs a GPU")
    device = torch.device("cpu" if backend == "cpu" else DEVICE)
    step, (k_cache, v_cache), (q, k, v) = mixed_step(device, dtype)
    split = ForwardContext(step.meta, [(k_cache.clone(), v_cache.clone())], select_backend(device, backend), step.split)
    whole = ForwardContext(step.meta, [(k_cache.clone(), v_cache.clone())], select_backend(device, "torch"))
    assert relative_error(split.attend(0, q, k, v, 0.125), whole.attend(0, q, k, v, 0.125)) < TOLERANCE[dtype]


def test_the_cpu_backend_runs_a_mixed_step_as_one_call_with_each_parts_bits():
    """One prefill-kernel call over decodes and chunks gives what the decode kernel and the
    prefill kernel give each part on its own, bit for bit."""
    step, (k_cache, v_cache), (q, k, v) = mixed_step(torch.device("cpu"), torch.float32)
    backend = select_backend(torch.device("cpu"), "cpu")
    caches = (k_cache.clone(), v_cache.clone())
    one_call = ForwardContext(step.meta, [caches], backend, step.split).attend(0, q, k, v, 0.125)
    each_part = AttentionBackend.mixed(backend, q, *caches, step.meta, step.split, 0.125)  # K/V now written
    assert torch.equal(one_call, each_part)
