"""Token fences in `transformers`' `model.generate`, through its `logits_processor` argument.

The masks are the engine's own: `fence_rows` asks each row's fence for its packed bitmask and
`apply_fence_rows` applies them in one kernel, so a fenced `generate` allows exactly what a
fenced request in zllm_core's engine allows.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessor

from zllm_core.engine.sampler import apply_fence_rows, fence_rows
from zllm_core.fence.token_fence import TokenFence


class FenceLogitsProcessor(LogitsProcessor):
    """One `TokenFence` per row of the batch (`num_return_sequences` and beams count as rows).

    `generate` calls it with every row's ids so far: the first call's length is the prompt's,
    and each later call advances each fence by the tokens sampled since. A row's fence stops at
    its first end token (what `generate` appends after it is padding). Use one processor per
    `generate` call, with fresh fences: they keep the state of the call that advanced them.
    """

    def __init__(self, fences: TokenFence | Sequence[TokenFence]):
        self.fences = [fences] if isinstance(fences, TokenFence) else list(fences)
        self.vocab_size = max(f.vocab_size for f in self.fences)
        self._prompt_len: int | None = None
        self._ended = [False] * len(self.fences)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[0] != len(self.fences):
            raise ValueError(f"{input_ids.shape[0]} rows to generate but {len(self.fences)} fences")
        self._advance(input_ids)
        masks, failed = fence_rows([None if ended else f for f, ended in zip(self.fences, self._ended)])
        if failed:
            raise next(iter(failed.values()))
        apply_fence_rows(scores, masks, self.vocab_size)
        return scores

    def _advance(self, input_ids: torch.Tensor) -> None:
        if self._prompt_len is None:
            self._prompt_len = input_ids.shape[1]
        for row, fence in enumerate(self.fences):
            new = input_ids[row, self._prompt_len + len(fence.states):].tolist()
            for token in new:
                if self._ended[row]:
                    break
                if token in fence.end_ids:
                    self._ended[row] = True
                else:
                    fence.advance(token)
