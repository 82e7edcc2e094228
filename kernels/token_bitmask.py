"""Token bitmask apply (issue 18): disallowed logits of the fenced rows set to -inf, in place.

One program per (mask row, block of BLOCK tokens).  Each token reads its mask word (the 32
tokens of a word share the load) and only disallowed tokens are stored, so logits are never
read.  Validation and the bit layout live in ``zllm_core.fence.bitmask``; this is the launch.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction


@triton.jit
def _token_bitmask_kernel(
    logits_ptr, bitmask_ptr, rows_ptr, num_logit_rows, vocab_size, head_vocab,
    stride_logits, stride_bitmask,
    HAS_ROWS: tl.constexpr, BLOCK: tl.constexpr,
):
    mask_row = tl.program_id(0)
    row = mask_row.to(tl.int64)
    if HAS_ROWS:
        row = tl.load(rows_ptr + mask_row).to(tl.int64)
    if (row >= 0) & (row < num_logit_rows):  # refused in Python; never write outside
        tokens = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        in_vocab = tokens < vocab_size
        words = tl.load(bitmask_ptr + mask_row.to(tl.int64) * stride_bitmask + tokens // 32,
                        mask=in_vocab, other=0)
        # Tokens past the tokenizer's vocabulary (a padded head) load 0: never allowed.
        blocked = ((words >> (tokens % 32)) & 1) == 0
        neg_inf = tl.full([BLOCK], float("-inf"), logits_ptr.dtype.element_ty)
        tl.store(logits_ptr + row * stride_logits + tokens, neg_inf,
                 mask=blocked & (tokens < head_vocab))


# Compiled, 1024 tokens is 8 per thread at 4 warps.  The interpreter runs programs one after
# another in Python at a cost per program, not per token, so there it takes few wide ones.
BLOCK = 1024 if isinstance(_token_bitmask_kernel, JITFunction) else 16384


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None,
                        vocab_size: int) -> None:
    """Launch over validated operands (see ``zllm_core.fence.bitmask.apply_token_bitmask_``)."""
    num_masks = bitmask.shape[0]
    head_vocab = logits.shape[1]
    if num_masks == 0 or head_vocab == 0:
        return
    _token_bitmask_kernel[(num_masks, triton.cdiv(head_vocab, BLOCK))](
        logits, bitmask, bitmask if rows is None else rows, logits.shape[0], vocab_size,
        head_vocab, logits.stride(0), bitmask.stride(0),
        HAS_ROWS=rows is not None, BLOCK=BLOCK, num_warps=4,
    )
