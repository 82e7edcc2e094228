"""From logits to next tokens: the per-request hook first, then vectorised sampling."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from zllm_core.engine.sequence import Sequence
from zllm_core.fence.bitmask import apply_token_bitmask_
from zllm_core.fence.token_fence import TokenFence

CDF_BLOCK = 1024  # tokens per block of the two-level inverse CDF


def _filter_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) what falls outside each row's top-k and nucleus; one sort for the batch."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab)).clamp(max=vocab)
    ranks = torch.arange(vocab, device=logits.device)[None, :]
    drop = ranks >= k[:, None]
    probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(dim=-1)
    # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    drop |= (probs.cumsum(dim=-1) - probs) >= top_p[:, None]
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def _uniforms(seqs: list[Sequence], device: torch.device) -> torch.Tensor:
    """One uniform draw per row; seeded requests draw from their own generator."""
    u = torch.rand(len(seqs), dtype=torch.float64, device=device)
    for i, seq in enumerate(seqs):
        if seq.generator is not None:
            u[i] = torch.rand(1, dtype=torch.float64, generator=seq.generator, device=device)[0]
    return u


def _inverse_cdf(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row of x (scaled logits, [rows, vocab], consumed) at uniform u (float64);
    -1 for a row with no finite positive mass.

    Two levels, so no float64 copy or serial prefix sum spans the vocabulary: float32 sums of
    CDF_BLOCK-token blocks (a vectorised reduction) locate the drawn block, then that one block
    per row is prefix-summed in float64. The residual is rescaled into the block's own sum, so a
    rounding difference between the two sums can never land a draw on a token of zero
    probability."""
    rows, vocab = x.shape
    top = x.amax(dim=-1, keepdim=True)
    weights = x.sub_(torch.where(torch.isfinite(top), top, 0)).exp_()  # unnormalised: no divide
    full = vocab // CDF_BLOCK * CDF_BLOCK
    sums = weights[:, :full].view(rows, -1, CDF_BLOCK).sum(dim=-1)
    if full < vocab:
        sums = torch.cat([sums, weights[:, full:].sum(dim=-1, keepdim=True)], dim=1)
    cum = sums.double().cumsum(dim=-1)
    total = cum[:, -1]
    target = u.clamp(max=1 - 2 ** -52) * total
    # right=True: a draw of exactly 0 must not land on a zero-probability block or token.
    block = torch.searchsorted(cum, target[:, None], right=True).clamp(max=cum.shape[1] - 1)
    before = torch.where(block > 0, cum.gather(1, (block - 1).clamp(min=0)), 0)
    positions = block * CDF_BLOCK + torch.arange(CDF_BLOCK, device=x.device)
    inside = positions < vocab
    inner = (weights.gather(1, positions.clamp(max=vocab - 1)) * inside).double().cumsum(dim=-1)
    residual = ((target[:, None] - before) / (cum.gather(1, block) - before)).clamp(0, 1 - 2 ** -52)
    within = torch.searchsorted(inner, residual * inner[:, -1:], right=True).clamp(max=CDF_BLOCK - 1)
    drawn = (block * CDF_BLOCK + within).squeeze(1)
    ok = torch.isfinite(total) & (total > 0) & (inner[:, -1] > 0)
    return torch.where(ok, drawn, -1)


def apply_hooks(logits: torch.Tensor, seqs: list[Sequence]) -> dict[int, Exception]:
    """Run each request's hook on its row in place; a failing hook fails its row only."""
    failed = {}
    for i, seq in enumerate(seqs):
        if seq.params.logits_hook is not None:
            try:
                seq.params.logits_hook(seq.token_ids, logits[i])
            except Exception as exc:  # noqa: BLE001 - a request's hook must not end the batch
                failed[i] = exc
    return failed


def fence_rows(fences: list[TokenFence | None]) -> tuple[dict[int, np.ndarray], dict[int, Exception]]:
    """Each fenced row's packed mask for this step (rows with nothing constrained left out),
    and the rows whose fence failed: a failing fence fails its row only."""
    masks, failed = {}, {}
    for i, fence in enumerate(fences):
        if fence is not None:
            try:
                row = fence.bitmask()
            except Exception as exc:  # noqa: BLE001 - one request's fence must not end the batch
                failed[i] = exc
                continue
            if row is not None:
                masks[i] = row
    return masks, failed


def apply_fence_rows(logits: torch.Tensor, masks: dict[int, np.ndarray], vocab_size: int) -> None:
    """Mask the fenced rows to their allowed tokens: one bitmask kernel for the batch; rows
    without a fence are not touched."""
    if masks:
        rows = list(masks)
        bitmask = torch.from_numpy(np.stack([masks[i] for i in rows]))
        apply_token_bitmask_(logits, bitmask.to(logits.device, non_blocking=True),
                             torch.tensor(rows, dtype=torch.int32, device=logits.device), vocab_size)


def sample(logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
    """``logits`` is fp32 ``[len(seqs), vocab]`` after hooks; one token per row."""
    rows = [i for i, s in enumerate(seqs) if not s.params.greedy]
    if len(rows) < len(seqs):
        out = logits.argmax(dim=-1)
    else:  # every row samples: no argmax pass over the batch
        out = torch.zeros(len(seqs), dtype=torch.long, device=logits.device)
    if rows:
        sub = [seqs[i] for i in rows]
        idx = torch.tensor(rows, device=logits.device)
        x = logits[idx]  # a copy: the draw consumes it
        temperatures = [s.params.temperature for s in sub]
        if any(t != 1.0 for t in temperatures):
            x.div_(torch.tensor(temperatures, device=logits.device)[:, None])
        if any(s.params.top_k > 0 or s.params.top_p < 1.0 for s in sub):
            top_k = torch.tensor([s.params.top_k for s in sub], device=logits.device)
            top_p = torch.tensor([s.params.top_p for s in sub], device=logits.device)
            x = _filter_top_k_top_p(x, top_k, top_p)
        drawn = _inverse_cdf(x, _uniforms(sub, logits.device))
        # A row with no finite mass (a hook masked everything) falls back to its argmax.
        empty = drawn < 0
        if bool(empty.any()):
            drawn[empty] = logits[idx[empty]].argmax(dim=-1)
        out[idx] = drawn
    return out.tolist()


@dataclass(frozen=True)
class TokenLogprob:
    """A sampled token's log-probability and the top alternatives at its position."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob), most likely first


def token_logprobs(logits: torch.Tensor, seqs: list[Sequence], tokens: list[int]) -> list[TokenLogprob | None]:
    """For the rows that ask (``params.logprobs``): the distribution the hooks and fences left,
    before temperature and top-p, as OpenAI's logprobs report it. One log-softmax and one
    top-k for all of them."""
    rows = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
    out: list[TokenLogprob | None] = [None] * len(seqs)
    if not rows:
        return out
    idx = torch.tensor(rows, device=logits.device)
    lp = logits[idx].log_softmax(dim=-1)
    chosen = lp.gather(1, torch.tensor([tokens[i] for i in rows], device=logits.device)[:, None])
    k = max(seqs[i].params.logprobs for i in rows)
    top_lp, top_ids = lp.topk(k, dim=-1) if k else (lp[:, :0], lp[:, :0].long())
    chosen, top_lp, top_ids = chosen.squeeze(1).tolist(), top_lp.tolist(), top_ids.tolist()
    for j, i in enumerate(rows):
        n = seqs[i].params.logprobs
        # A fence may allow fewer than n tokens: masked ones (-inf) are no alternatives.
        top = tuple((t, lp) for t, lp in zip(top_ids[j][:n], top_lp[j][:n]) if math.isfinite(lp))
        out[i] = TokenLogprob(tokens[i], chosen[j], top)
    return out
