"""Token bitmasks: each fenced request's allowed tokens, packed 32 to an int32 word, applied
to the logits between the output head and sampling.

The layout is xgrammar's: token ``t`` is allowed iff bit ``t % 32`` of word ``t // 32`` of
the request's row is 1, so masks from either side need no conversion.  Fences build rows on
the CPU with numpy (``pack_allowed``, ``fill_bitmask_row_``); ``apply_token_bitmask_``
masks the logits in place on their own device.
"""
from __future__ import annotations

import numpy as np
import torch

BITS = 32
LOGIT_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}  # csrc/token_bitmask.h
BACKENDS = ("torch", "cpp", "triton", "cuda")


def bitmask_width(vocab_size: int) -> int:
    """Words in one row: ``ceil(vocab_size / 32)``."""
    if vocab_size < 0:
        raise ValueError(f"vocab_size must be >= 0, got {vocab_size}")
    return -(-vocab_size // BITS)


def allocate_token_bitmask(batch: int, vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """An int32 ``[batch, bitmask_width(vocab_size)]`` bitmask with every token allowed."""
    return torch.full((batch, bitmask_width(vocab_size)), -1, dtype=torch.int32, device=device)


def pack_allowed(allowed: np.ndarray) -> np.ndarray:
    """Bool ``[..., vocab]`` to int32 ``[..., bitmask_width(vocab)]``; padding bits are 0."""
    allowed = np.asarray(allowed)
    if allowed.dtype != np.bool_:
        raise ValueError(f"pack_allowed takes a bool array, got {allowed.dtype}")
    packed = np.packbits(allowed, axis=-1, bitorder="little")  # token t -> bit t % 8 of byte t // 8
    pad = -packed.shape[-1] % 4
    if pad:
        packed = np.concatenate([packed, np.zeros((*packed.shape[:-1], pad), np.uint8)], axis=-1)
    return packed.view("<i4").astype(np.int32, copy=False)  # bytes little end first: bit t % 32


def unpack(row: np.ndarray | torch.Tensor, vocab_size: int) -> np.ndarray:
    """Int32 ``[..., width]`` to bool ``[..., vocab_size]``, the inverse of ``pack_allowed``."""
    words = np.ascontiguousarray(np.asarray(row, dtype=np.int32))
    if words.shape[-1] < bitmask_width(vocab_size):
        raise ValueError(f"{words.shape[-1]} words hold fewer than {vocab_size} tokens")
    bits = np.unpackbits(words.astype("<i4", copy=False).view(np.uint8), axis=-1, bitorder="little")
    return bits[..., :vocab_size].astype(bool)


def fill_bitmask_row_(bitmask_row: torch.Tensor, allowed: np.ndarray) -> None:
    """Overwrite one row with ``allowed``: a bool array over the vocabulary, or token ids.

    A bool array may be shorter than the row (the rest is disallowed); ids must fit the row.
    """
    if bitmask_row.dim() != 1 or bitmask_row.dtype != torch.int32:
        raise ValueError(f"bitmask_row must be a 1-D int32 tensor, got {bitmask_row.dtype} "
                         f"{tuple(bitmask_row.shape)}")
    capacity = bitmask_row.shape[0] * BITS
    allowed = np.asarray(allowed)
    if allowed.dtype != np.bool_:
        if allowed.dtype.kind not in "iu":
            raise ValueError(f"allowed must be bool or integer token ids, got {allowed.dtype}")
        if allowed.size and (allowed.min() < 0 or allowed.max() >= capacity):
            raise ValueError(f"token ids must lie in [0, {capacity}), got [{allowed.min()}, {allowed.max()}]")
        ids, allowed = allowed, np.zeros(capacity, bool)
        allowed[ids] = True
    if allowed.ndim != 1 or allowed.shape[0] > capacity:
        raise ValueError(f"allowed must be 1-D with at most {capacity} entries, got {allowed.shape}")
    packed = pack_allowed(allowed)
    bitmask_row[: packed.shape[0]].copy_(torch.from_numpy(packed))
    bitmask_row[packed.shape[0]:] = 0


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None,
                         vocab_size: int | None = None, backend: str | None = None) -> None:
    """Set the disallowed logits of each fenced row to -inf, in place.

    ``logits``: fp32/fp16/bf16 ``[num_logit_rows, head_vocab]``; ``bitmask``: int32
    ``[n, width]``; ``rows``: int32/int64 ``[n]``, the distinct logits row of each bitmask
    row (None: row i for bitmask row i, and n == num_logit_rows).  Rows without a mask are
    not touched.  Tokens >= ``vocab_size`` (default ``head_vocab``) are always masked in the
    fenced rows; bits past that are ignored.  ``backend`` (one of ``BACKENDS``) overrides
    the choice by device: the CUDA kernel on a GPU (Triton where the extension lacks it),
    the C++ loop on the CPU.
    """
    vocab_size = check_operands(logits, bitmask, rows, vocab_size)
    backend = backend or default_backend(logits.device)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if bitmask.shape[0] == 0:
        return
    rows = None if rows is None else rows.contiguous()  # the kernels index it as a flat array
    if backend == "torch":
        apply_token_bitmask_reference(logits, bitmask, rows, vocab_size)
    elif backend == "triton":
        _triton_kernels().apply_token_bitmask(logits, bitmask, rows, vocab_size)
    else:
        _apply_native(backend, logits, bitmask, rows, vocab_size)


def check_operands(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None,
                   vocab_size: int | None) -> int:
    """Raise ValueError for operands no backend may take; return the effective vocab_size."""
    if logits.dim() != 2 or logits.dtype not in LOGIT_DTYPES:
        raise ValueError(f"logits must be 2-D fp32/fp16/bf16, got {logits.dtype} {tuple(logits.shape)}")
    if bitmask.dim() != 2 or bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must be 2-D int32, got {bitmask.dtype} {tuple(bitmask.shape)}")
    if bitmask.device != logits.device:
        raise ValueError(f"bitmask is on {bitmask.device}, logits on {logits.device}")
    if logits.stride(1) != 1 or bitmask.stride(1) != 1:
        raise ValueError("logits and bitmask rows must be contiguous (stride 1 along the vocabulary)")
    num_rows, head_vocab = logits.shape
    vocab_size = head_vocab if vocab_size is None else vocab_size
    if not 0 <= vocab_size <= head_vocab:
        raise ValueError(f"vocab_size must lie in [0, {head_vocab}] (the logits' width), got {vocab_size}")
    if bitmask.shape[1] < bitmask_width(vocab_size):
        raise ValueError(f"bitmask has {bitmask.shape[1]} words, {vocab_size} tokens need "
                         f"{bitmask_width(vocab_size)}")
    if rows is None:
        if bitmask.shape[0] != num_rows:
            raise ValueError(f"without rows, bitmask needs one row per logits row: "
                             f"{bitmask.shape[0]} != {num_rows}")
        return vocab_size
    if rows.dim() != 1 or rows.dtype not in (torch.int32, torch.int64) or rows.shape[0] != bitmask.shape[0]:
        raise ValueError(f"rows must be 1-D int32/int64 with one entry per bitmask row "
                         f"({bitmask.shape[0]}), got {rows.dtype} {tuple(rows.shape)}")
    if rows.device != logits.device:
        raise ValueError(f"rows is on {rows.device}, logits on {logits.device}")
    # Values are checked where that is free; on a GPU it would stall the stream (the
    # kernels skip out-of-range rows instead of writing outside the logits).
    if rows.device.type == "cpu" and rows.numel():
        if rows.min() < 0 or rows.max() >= num_rows:
            raise ValueError(f"rows must lie in [0, {num_rows}), got [{rows.min()}, {rows.max()}]")
        if torch.unique(rows).numel() != rows.numel():
            raise ValueError("rows must be distinct: each logits row takes at most one bitmask row")
    return vocab_size


def apply_token_bitmask_reference(logits: torch.Tensor, bitmask: torch.Tensor,
                                  rows: torch.Tensor | None = None, vocab_size: int | None = None) -> None:
    """The specification in torch ops, vectorised over rows and tokens (no validation)."""
    num_masks, head_vocab = bitmask.shape[0], logits.shape[1]
    vocab_size = head_vocab if vocab_size is None else vocab_size
    words = bitmask[:, : bitmask_width(vocab_size)]
    shifts = torch.arange(BITS, dtype=torch.int32, device=bitmask.device)
    allowed = ((words.unsqueeze(-1) >> shifts) & 1).reshape(num_masks, -1)[:, :vocab_size].bool()
    blocked = torch.ones(num_masks, head_vocab, dtype=torch.bool, device=logits.device)
    blocked[:, :vocab_size] = ~allowed
    if rows is None:
        logits.masked_fill_(blocked, float("-inf"))
    else:
        rows = rows.long()
        logits[rows] = logits[rows].masked_fill(blocked, float("-inf"))


def default_backend(device: torch.device) -> str:
    """The fastest backend this build has for ``device``."""
    if device.type == "cuda":
        return "cuda" if hasattr(_native(), "apply_token_bitmask_cuda") else "triton"
    return "cpp" if hasattr(_native(), "apply_token_bitmask_cpu") else "torch"


def _apply_native(backend: str, logits: torch.Tensor, bitmask: torch.Tensor,
                  rows: torch.Tensor | None, vocab_size: int) -> None:
    expected = "cuda" if backend == "cuda" else "cpu"
    if logits.device.type != expected:
        raise ValueError(f"backend {backend!r} takes {expected} tensors, got {logits.device}")
    entry = getattr(_native(), f"apply_token_bitmask_{expected}", None)
    if entry is None:
        raise ValueError(f"zllm_core._native was built without apply_token_bitmask_{expected}")
    pointers = (logits.data_ptr(), bitmask.data_ptr(), 0 if rows is None else rows.data_ptr())
    sizes = (LOGIT_DTYPES[logits.dtype], int(rows is not None and rows.dtype == torch.int64),
             logits.shape[0], bitmask.shape[0], vocab_size, logits.shape[1])
    strides = (logits.stride(0), bitmask.stride(0))
    if backend == "cuda":
        entry(pointers, sizes, strides, torch.cuda.current_stream(logits.device).cuda_stream)
    else:
        entry(pointers, sizes, strides)


def _native():
    try:
        from zllm_core import _native
    except ImportError:
        return None
    return _native


def _triton_kernels():
    """Imported on first use: Triton takes a second to import and CPU serving never needs it."""
    try:
        import zllm_core.kernels as kernels
    except ModuleNotFoundError as missing:  # a source checkout: kernels/ sits beside zllm_core/
        if missing.name != "zllm_core.kernels":
            raise
        import kernels
    return kernels
