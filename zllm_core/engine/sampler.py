"""From logits to next tokens: the per-request hook first, then vectorised sampling."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from zllm_core.engine.sampling_params import Fence
from zllm_core.engine.sequence import Sequence
from zllm_core.fence.bitmask import apply_token_bitmask_

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


def apply_hooks(logits: torch.Tensor, seqs: list[Sequence], rows: np.ndarray | None = None) -> dict[int, Exception]:
    """Run each request's hook on its row (``rows[i]``, default i) in place; a failing hook fails
    its request only. Requests with a hook are never drafted: they own one row."""
    failed = {}
    for i, seq in enumerate(seqs):
        if seq.params.logits_hook is not None:
            try:
                # One array (the prompt and outputs joined): a hook is Python over a vocabulary row anyway.
                seq.params.logits_hook(np.asarray(seq.token_ids), logits[i if rows is None else int(rows[i])])
            except Exception as exc:  # noqa: BLE001 - a request's hook must not end the batch
                failed[i] = exc
    return failed


def fence_rows(fences: list[Fence | None], drafts: list[np.ndarray] | None = None
               ) -> tuple[dict[int, np.ndarray], dict[int, Exception]]:
    """Each fenced row's packed mask for this step (rows with nothing constrained left out),
    and the requests whose fence failed: a failing fence fails its request only. A request
    with a draft owns 1 + len(draft) rows: a clone of its fence walks the draft to give each
    its row, while the fence itself stays put until the accepted tokens are known."""
    masks, failed = {}, {}
    row = 0
    for i, fence in enumerate(fences):
        draft = drafts[i] if drafts is not None else ()
        if fence is not None:
            try:
                probe = fence.clone() if len(draft) else fence
                for j in range(len(draft) + 1):
                    mask = probe.bitmask()
                    if mask is not None:
                        masks[row + j] = mask
                    if j < len(draft):
                        probe.advance(int(draft[j]))
            except Exception as exc:  # noqa: BLE001 - one request's fence must not end the batch
                failed[i] = exc
        row += 1 + len(draft)
    return masks, failed


def apply_fence_rows(logits: torch.Tensor, masks: dict[int, np.ndarray], vocab_size: int) -> None:
    """Mask the fenced rows to their allowed tokens: one bitmask kernel for the batch; rows
    without a fence are not touched."""
    if masks:
        rows = list(masks)
        bitmask = torch.from_numpy(np.stack([masks[i] for i in rows]))
        apply_token_bitmask_(logits, bitmask.to(logits.device, non_blocking=True),
                             torch.tensor(rows, dtype=torch.int32, device=logits.device), vocab_size)


def _processed(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """A copy of the rows with each request's temperature, top-k and top-p applied."""
    x = logits.clone()
    temperatures = [s.params.temperature for s in seqs]
    if any(t != 1.0 for t in temperatures):
        x.div_(torch.tensor(temperatures, device=logits.device)[:, None])
    if any(s.params.top_k > 0 or s.params.top_p < 1.0 for s in seqs):
        top_k = torch.tensor([s.params.top_k for s in seqs], device=logits.device)
        top_p = torch.tensor([s.params.top_p for s in seqs], device=logits.device)
        x = _filter_top_k_top_p(x, top_k, top_p)
    return x


def sample(logits: torch.Tensor, seqs: list[Sequence], exclude: list[int] | None = None) -> list[int]:
    """``logits`` is fp32 ``[len(seqs), vocab]`` after hooks; one token per row. ``exclude``
    names a token per row (or -1) that sampled rows must not draw: the residual after a
    rejected draft token."""
    rows = [i for i, s in enumerate(seqs) if not s.params.greedy]
    if len(rows) < len(seqs):
        out = logits.argmax(dim=-1)
    else:  # every row samples: no argmax pass over the batch
        out = torch.zeros(len(seqs), dtype=torch.long, device=logits.device)
    if rows:
        idx = torch.tensor(rows, device=logits.device)
        x = _processed(logits[idx], [seqs[i] for i in rows])  # a copy: the draw consumes it
        if exclude is not None:
            banned = torch.tensor([exclude[i] for i in rows], device=logits.device)
            hit = banned >= 0
            x[hit.nonzero()[:, 0], banned[hit]] = float("-inf")
        drawn = _inverse_cdf(x, _uniforms([seqs[i] for i in rows], logits.device))
        # A row with no finite mass (a hook masked everything) falls back to its argmax.
        empty = drawn < 0
        if bool(empty.any()):
            drawn[empty] = logits[idx[empty]].argmax(dim=-1)
        out[idx] = drawn
    return out.tolist()


def _accepts(x: torch.Tensor, seqs: list[Sequence], tokens: torch.Tensor) -> list[bool]:
    """Whether each draft row accepts its token: greedy rows when it is the argmax, sampled rows
    with probability p(token) under the target distribution after temperature and top-k/p."""
    keep = x.argmax(dim=-1) == tokens
    sampled = [i for i, s in enumerate(seqs) if not s.params.greedy]
    if sampled:
        sub = [seqs[i] for i in sampled]
        p = _processed(x[sampled], sub).softmax(dim=-1).gather(1, tokens[sampled, None])[:, 0]
        keep[sampled] = _uniforms(sub, x.device) < p.double()
    return keep.tolist()


def verify(logits: torch.Tensor, seqs: list[Sequence], drafts: list[np.ndarray]) -> list[list[int]]:
    """Each sequence's next tokens: the draft tokens the model accepts, then one drawn after them.

    Sequence i owns ``1 + len(drafts[i])`` consecutive rows (the last token's, then each draft
    token's). Greedy rows accept while the draft equals the argmax. Sampled rows accept draft
    token d with probability p(d), the target distribution after temperature and top-k/p (the
    draft proposes d with certainty); at the first rejection the next token is drawn from p
    without d, renormalised, so the output keeps the distribution of sampling one at a time."""
    if not any(len(d) for d in drafts):
        return [[t] for t in sample(logits, seqs)]
    starts = np.cumsum([0] + [1 + len(d) for d in drafts[:-1]])
    rows = [int(starts[i]) + j for i, d in enumerate(drafts) for j in range(len(d))]
    keep = _accepts(logits[rows], [s for s, d in zip(seqs, drafts) for _ in d],
                    torch.from_numpy(np.concatenate(drafts).astype(np.int64)).to(logits.device))
    accepted, at = [], 0
    for d in drafts:
        accepted.append(next((j for j in range(len(d)) if not keep[at + j]), len(d)))
        at += len(d)
    final = [int(starts[i]) + accepted[i] for i in range(len(seqs))]
    exclude = [int(d[a]) if a < len(d) else -1 for d, a in zip(drafts, accepted)]
    last = sample(logits[final], seqs, exclude if any(e >= 0 for e in exclude) else None)
    return [[int(t) for t in d[:a]] + [tok] for d, a, tok in zip(drafts, accepted, last)]


@dataclass(frozen=True)
class TokenLogprob:
    """A sampled token's log-probability and the top alternatives at its position."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob), most likely first


def token_logprobs(logits: torch.Tensor, seqs: list[Sequence], tokens: list[int],
                   at: np.ndarray | None = None) -> list[TokenLogprob | None]:
    """For the requests that ask (``params.logprobs``; never drafted, so one row each, ``at[i]``,
    default i): the distribution the hooks and fences left, before temperature and top-p, as
    OpenAI's logprobs report it. One log-softmax and one top-k for all of them."""
    rows = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
    out: list[TokenLogprob | None] = [None] * len(seqs)
    if not rows:
        return out
    idx = torch.tensor([i if at is None else int(at[i]) for i in rows], device=logits.device)
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
