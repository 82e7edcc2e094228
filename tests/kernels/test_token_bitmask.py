"""Token bitmask apply (issue 18): the layout, the torch reference against a per-row numpy
reading of the layout, and every backend against the reference, bit for bit.  The CUDA
kernel's own source also runs here, built for the host over the SIMT stand-ins."""
import ctypes

import numpy as np
import pytest
import torch

from simt_build import host_library
from zllm_core.fence import bitmask as bm

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# (logits rows, head_vocab, vocab_size, fenced rows or None): a one-row batch; a full batch
# of 256 over a padded head whose vocabulary is no multiple of 32; Qwen's head (151936 rows
# for 151669 tokens) with a subset fenced; a 152K head that is no multiple of 32 either.
CASES = {
    "b1-v32000": (1, 32000, 32000, None),
    "b256-v32001-head32064": (256, 32064, 32001, None),
    "b8-qwen-rows": (8, 151936, 151669, [5, 0, 7]),
    "b4-v152007-rows": (4, 152007, 152007, [3, 1]),
}


class Args(ctypes.Structure):
    """zllm::TokenBitmaskArgs (csrc/token_bitmask.h), field for field."""

    _fields_ = ([(n, ctypes.c_void_p) for n in ("logits", "bitmask", "rows")]
                + [("rows_int64", ctypes.c_bool)]
                + [(n, ctypes.c_int) for n in ("dtype", "num_logit_rows", "num_masks",
                                               "vocab_size", "head_vocab")]
                + [(n, ctypes.c_int64) for n in ("logits_stride", "bitmask_stride")])


@pytest.fixture(scope="module")
def host_cuda_kernel(tmp_path_factory):
    entry = host_library(tmp_path_factory, "token_bitmask_host.cpp").host_apply_token_bitmask

    def apply(logits, bitmask, rows, vocab_size):
        bm.check_operands(logits, bitmask, rows, vocab_size)
        args = Args(logits.data_ptr(), bitmask.data_ptr(), None if rows is None else rows.data_ptr(),
                    rows is not None and rows.dtype == torch.int64, bm.LOGIT_DTYPES[logits.dtype],
                    logits.shape[0], bitmask.shape[0], vocab_size, logits.shape[1],
                    logits.stride(0), bitmask.stride(0))
        assert entry(ctypes.byref(args)) == 0
    return apply


@pytest.fixture(params=["cpp", "triton", "cuda", "cuda-on-host"])
def backend(request):
    """(apply(logits, bitmask, rows, vocab_size), device) for one backend."""
    name = request.param
    if name == "cuda-on-host":
        return request.getfixturevalue("host_cuda_kernel"), "cpu"
    if name == "cuda" and (DEVICE != "cuda" or bm.default_backend(torch.device("cuda")) != "cuda"):
        pytest.skip("the CUDA kernel needs a GPU and an extension built with nvcc")
    device = "cpu" if name == "cpp" else DEVICE
    return (lambda *a: bm.apply_token_bitmask_(*a, backend=name)), device


def random_bitmask(num_masks: int, width: int, seed: int) -> torch.Tensor:
    """Random words, with runs of all-disallowed and all-allowed words (the fast paths)."""
    g = torch.Generator().manual_seed(seed)
    words = torch.randint(-2**31, 2**31, (num_masks, width), generator=g, dtype=torch.int64)
    kind = torch.randint(0, 4, (num_masks, width), generator=g)
    words[kind == 1] = 0
    words[kind == 2] = -1
    return words.to(torch.int32)


def make_case(name: str, dtype: torch.dtype, rows_dtype=torch.int64, seed=0):
    """Logits, a bitmask as wide as the head (its bits past vocab_size must be ignored), rows."""
    num_rows, head_vocab, vocab_size, rows = CASES[name]
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_rows, head_vocab, generator=g).to(dtype)
    num_masks = num_rows if rows is None else len(rows)
    bitmask = random_bitmask(num_masks, bm.bitmask_width(head_vocab), seed + 1)
    rows = None if rows is None else torch.tensor(rows, dtype=rows_dtype)
    return logits, bitmask, rows, vocab_size


def spec(logits, bitmask, rows, vocab_size) -> torch.Tensor:
    """The contract read row by row through ``unpack``: a slow, independent reference."""
    out = logits.clone()
    targets = range(len(bitmask)) if rows is None else rows.tolist()
    for i, row in enumerate(targets):
        blocked = torch.from_numpy(~bm.unpack(bitmask[i].numpy(), vocab_size))
        out[row, :vocab_size][blocked] = float("-inf")
        out[row, vocab_size:] = float("-inf")
    return out


def reference(logits, bitmask, rows, vocab_size) -> torch.Tensor:
    out = logits.clone()
    bm.apply_token_bitmask_reference(out, bitmask, rows, vocab_size)
    return out


@pytest.mark.parametrize("name", CASES)
def test_reference_follows_the_bit_layout(name):
    case = make_case(name, torch.float32)
    assert torch.equal(reference(*case), spec(*case))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", CASES)
def test_backend_matches_reference_bit_for_bit(backend, name, dtype):
    apply, device = backend
    logits, bitmask, rows, vocab_size = make_case(name, dtype)
    expected = reference(logits, bitmask, rows, vocab_size)
    logits, bitmask = logits.to(device), bitmask.to(device)
    rows = None if rows is None else rows.to(device)
    apply(logits, bitmask, rows, vocab_size)
    assert torch.equal(logits.cpu().view(torch.int16 if dtype != torch.float32 else torch.int32),
                       expected.view(torch.int16 if dtype != torch.float32 else torch.int32))


def test_backend_takes_fp16_int32_rows_and_strided_rows(backend):
    """fp16 logits, int32 rows, and row strides wider than the rows (a slice of a buffer)."""
    apply, device = backend
    logits, bitmask, rows, vocab_size = make_case("b8-qwen-rows", torch.float16, torch.int32, seed=5)
    logits = torch.cat([logits, logits], dim=1)[:, :logits.shape[1]]
    bitmask = torch.cat([bitmask, bitmask], dim=1)[:, :bitmask.shape[1]]
    expected = reference(logits, bitmask, rows, vocab_size)
    logits, bitmask, rows = logits.to(device), bitmask.to(device), rows.to(device)
    apply(logits, bitmask, rows, vocab_size)
    assert torch.equal(logits.cpu().view(torch.int16), expected.view(torch.int16))


def test_backend_leaves_logits_alone_without_masks(backend):
    apply, device = backend
    logits = torch.randn(3, 100, device=device)
    before = logits.clone()
    apply(logits, torch.zeros(0, 4, dtype=torch.int32, device=device),
          torch.zeros(0, dtype=torch.int64, device=device), 100)
    assert torch.equal(logits, before)


def test_rows_may_be_a_strided_view():
    logits, bitmask, _, vocab_size = make_case("b8-qwen-rows", torch.float32)
    rows = torch.tensor([5, 9, 0, 9, 7, 9])[::2]
    expected = reference(logits, bitmask, rows.contiguous(), vocab_size)
    bm.apply_token_bitmask_(logits, bitmask, rows, vocab_size)
    assert torch.equal(logits, expected)


def test_default_backend_is_the_native_loop_on_cpu_and_cuda_on_a_gpu():
    assert bm.default_backend(torch.device("cpu")) == "cpp"
    if DEVICE == "cuda":
        assert bm.default_backend(torch.device("cuda")) in ("cuda", "triton")


@pytest.mark.parametrize("vocab_size", [1, 31, 32, 33, 151669])
def test_pack_and_unpack_round_trip(vocab_size):
    allowed = np.random.default_rng(vocab_size).random((3, vocab_size)) < 0.5
    packed = bm.pack_allowed(allowed)
    assert packed.dtype == np.int32 and packed.shape == (3, bm.bitmask_width(vocab_size))
    assert np.array_equal(bm.unpack(packed, vocab_size), allowed)
    assert np.array_equal(bm.unpack(torch.from_numpy(packed[1]), vocab_size), allowed[1])


def test_pack_puts_token_t_at_bit_t_mod_32_of_word_t_div_32():
    allowed = np.zeros(70, bool)
    allowed[[0, 33, 63, 69]] = True
    assert bm.pack_allowed(allowed).tolist() == [1, 2 | -2**31, 1 << 5]


def test_allocated_bitmask_allows_everything():
    mask = bm.allocate_token_bitmask(2, 65)
    assert mask.dtype == torch.int32 and mask.shape == (2, 3) and (mask == -1).all()
    logits = torch.randn(2, 65)
    before = logits.clone()
    bm.apply_token_bitmask_(logits, mask)
    assert torch.equal(logits, before)


def test_fill_row_from_bools_or_token_ids():
    mask = bm.allocate_token_bitmask(2, 100)
    bm.fill_bitmask_row_(mask[0], np.array([5, 64, 99]))
    allowed = np.zeros(40, bool)
    allowed[[1, 39]] = True
    bm.fill_bitmask_row_(mask[1], allowed)  # shorter than the row: the rest is disallowed
    assert np.flatnonzero(bm.unpack(mask[0], 100)).tolist() == [5, 64, 99]
    assert np.flatnonzero(bm.unpack(mask[1], 100)).tolist() == [1, 39]
    with pytest.raises(ValueError, match="token ids"):
        bm.fill_bitmask_row_(mask[0], np.array([128]))


def _bad_calls():
    f32, i32 = torch.float32, torch.int32
    logits, mask = torch.zeros(4, 100), torch.zeros(4, 4, dtype=i32)
    return {
        "1-D logits": (torch.zeros(100), mask, None, None),
        "int logits": (torch.zeros(4, 100, dtype=i32), mask, None, None),
        "int64 bitmask": (logits, mask.long(), None, None),
        "too few words": (logits, mask[:, :3], None, None),
        "vocab past the head": (logits, torch.zeros(4, 5, dtype=i32), None, 101),
        "one mask per row without rows": (logits, mask[:3], None, None),
        "rows of the wrong length": (logits, mask[:2], torch.tensor([0]), None),
        "float rows": (logits, mask[:1], torch.tensor([0.0]), None),
        "rows out of range": (logits, mask[:2], torch.tensor([0, 4]), None),
        "negative rows": (logits, mask[:1], torch.tensor([-1]), None),
        "repeated rows": (logits, mask[:2], torch.tensor([1, 1]), None),
        "column-major logits": (torch.zeros(100, 4, dtype=f32).t(), mask, None, None),
    }


@pytest.mark.parametrize("label", list(_bad_calls()))
def test_bad_operands_are_refused(label):
    with pytest.raises(ValueError):
        bm.apply_token_bitmask_(*_bad_calls()[label])


def test_unknown_or_misplaced_backend_is_refused():
    logits, mask = torch.zeros(1, 64), torch.zeros(1, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="backend"):
        bm.apply_token_bitmask_(logits, mask, backend="flash")
    with pytest.raises(ValueError, match="cuda"):
        bm.apply_token_bitmask_(logits, mask, backend="cuda")
