"""The prefill kernels (Triton, interpreted on CPU; the native CPU kernel) against the torch
reference, and the CPU kernel's promise that a row's bits depend on nothing but its own
query and keys."""
import pytest
import torch

from paged_case import TOLERANCE, make_case, on_threads, relative_error
from zllm_core.model import cpu_attention
from zllm_core.model.triton_attention import kernels

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(params=["triton", "cpu"])
def prefill(request):
    return request.param


def run_prefill(prefill, case):
    m = case.meta
    if prefill == "cpu":
        if case.q.device.type != "cpu" or not cpu_attention.fits_kernel(case.q, case.k_cache, case.v_cache):
            pytest.skip("the CPU kernel takes float32 CPU tensors (others use the torch reference)")
        return cpu_attention.cpu_paged_prefill(case.q, case.k_cache, case.v_cache, m.block_tables, m.seq_lens,
                                               m.query_start_loc, case.scale, out=case.poisoned_out())
    return kernels.paged_prefill(case.q, case.k_cache, case.v_cache, m.block_tables, m.seq_lens,
                                 m.query_start_loc, m.max_query_len, case.scale, out=case.poisoned_out())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_new_and_append_prefill_share_one_launch(prefill, head_dim, block_size, dtype):
    # A NewPrefill (nothing cached), AppendPrefills with short and page-straddling chunks
    # (70 tokens span three query tiles), and a one-token chunk, all in one batch.
    seq_lens = [45, 150, 100, 9]
    query_lens = [45, 70, 3, 1]
    case = make_case(seq_lens, query_lens, num_heads=8, num_kv_heads=2, head_dim=head_dim,
                     block_size=block_size, dtype=dtype, seed=1)
    assert relative_error(run_prefill(prefill, case), case.exact(decode=False)) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 2), (3, 3), (6, 2), (16, 2)])
def test_prefill_covers_every_query_head_group(prefill, num_heads, num_kv_heads):
    case = make_case([40, 66], [40, 25], num_heads, num_kv_heads, head_dim=64, block_size=16,
                     dtype=torch.float32, seed=2)
    assert relative_error(run_prefill(prefill, case), case.exact(decode=False)) < TOLERANCE[torch.float32]


def cpu_case(head_dim: int, num_heads: int, num_kv_heads: int, seed: int = 7):
    """Decodes, chunks with and without cached context, a chunk whose rows fill a query tile
    and spill into the next, and a context far past one tile of keys; blocks in random order."""
    seq_lens = [1, 33, 500, 64, 17, 300, 2]
    query_lens = [1, 1, 40, 64, 5, 1, 2]
    return make_case(seq_lens, query_lens, num_heads, num_kv_heads, head_dim=head_dim, block_size=16,
                     dtype=torch.float32, seed=seed, device="cpu")


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 2), (3, 3), (8, 1), (16, 1)])
def test_cpu_prefill_row_is_the_decode_of_its_position(head_dim, num_heads, num_kv_heads):
    """Every query row, whichever loop form its tile takes (one row at a time below four rows,
    one row per vector lane above), equals bit for bit the decode kernel over the keys up to
    its position; so a one-token chunk in a mixed call is the decode it would be alone."""
    case = cpu_case(head_dim, num_heads, num_kv_heads)
    m = case.meta
    out = cpu_attention.cpu_paged_prefill(case.q, case.k_cache, case.v_cache, m.block_tables, m.seq_lens,
                                          m.query_start_loc, case.scale, out=case.poisoned_out())
    assert relative_error(out, case.exact(decode=False)) < TOLERANCE[torch.float32]
    query_lens = m.query_start_loc.diff()
    seq = torch.repeat_interleave(torch.arange(len(query_lens)), query_lens)
    offset = torch.arange(len(seq)) - m.query_start_loc[:-1].long()[seq]
    positions = (m.seq_lens[seq] - query_lens[seq] + offset).to(torch.int32)
    alone = cpu_attention.cpu_paged_decode(case.q, case.k_cache, case.v_cache, m.block_tables[seq], positions + 1,
                                           case.scale, out=case.poisoned_out())
    assert torch.equal(out, alone)


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_cpu_prefill_answers_alike_on_any_number_of_threads(threads):
    case = cpu_case(128, 12, 4, seed=9)
    m = case.meta
    outs = [on_threads(n, lambda: cpu_attention.cpu_paged_prefill(case.q, case.k_cache, case.v_cache, m.block_tables,
                                                                  m.seq_lens, m.query_start_loc, case.scale,
                                                                  out=case.poisoned_out()))
            for n in (1, threads)]
    assert torch.equal(outs[0], outs[1])


def test_cpu_prefill_refuses_inconsistent_chunks():
    case = make_case([40, 20], [8, 4], num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                     dtype=torch.float32, device="cpu")
    m = case.meta
    run = lambda qsl, seq_lens: cpu_attention.cpu_paged_prefill(  # noqa: E731
        case.q, case.k_cache, case.v_cache, m.block_tables, seq_lens, qsl, case.scale)
    with pytest.raises(ValueError, match="no longer than its sequence"):
        run(m.query_start_loc, torch.tensor([40, 3], dtype=torch.int32))
    with pytest.raises(ValueError, match="query_start_loc"):
        run(torch.tensor([0, 8, 11], dtype=torch.int32), m.seq_lens)
    with pytest.raises(ValueError, match="float32"):
        cpu_attention.cpu_paged_prefill(case.q.half(), case.k_cache.half(), case.v_cache.half(), m.block_tables,
                                        m.seq_lens, m.query_start_loc, case.scale)


def test_cpu_backend_sends_long_chunks_over_long_contexts_to_sdpa_and_the_rest_to_the_kernel():
    """A long chunk over a long context gets the torch reference's bits, every other chunk and
    decode the kernel's, each as it would alone: a chunk's path depends on its own shape."""
    from zllm_core.model.backends import select_backend
    from zllm_core.model.torch_attention import TorchAttention

    long_q, long_keys = cpu_attention.SDPA_MIN_QUERY, cpu_attention.SDPA_MIN_KEYS
    case = make_case([40, long_keys + 5, 300, long_keys, 7], [1, long_q, 20, long_q - 1, 7], num_heads=4,
                     num_kv_heads=2, head_dim=64, block_size=16, dtype=torch.float32, seed=4, device="cpu")
    m = case.meta
    out = select_backend(torch.device("cpu"), "cpu").prefill(case.q, case.k_cache, case.v_cache, m, case.scale)
    assert relative_error(out, case.exact(decode=False)) < TOLERANCE[torch.float32]
    is_long = torch.tensor([False, True, False, False, False])
    for chunks, alone in ((is_long, TorchAttention().prefill), (~is_long, cpu_attention.CpuAttention._kernel_prefill)):
        rows, part = cpu_attention.subset(m, chunks)
        assert torch.equal(out[rows], alone(case.q[rows], case.k_cache, case.v_cache, part, case.scale))
