"""What a request asks of sampling; validated once, at the boundary."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

import numpy as np
import torch

# A per-request hook between the output head and sampling: it receives the tokens so far
# (a read-only int32 array) and edits that request's logits row in place (token fences mask here).
LogitsHook = Callable[[np.ndarray, torch.Tensor], None]
MAX_LOGPROBS = 20  # top alternatives per token, as OpenAI's APIs allow


class Fence(Protocol):
    """A request's token fence (zllm_core/fence): the engine asks it which tokens may come
    next, as a packed int32 bitmask row, and tells it which one did. It knows no tool names."""

    def bitmask(self) -> Optional[np.ndarray]: ...  # None: nothing constrained this step

    def advance(self, token: int) -> None: ...

    def clone(self) -> "Fence": ...  # a copy to walk a draft on; the original stays put


@dataclass
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 keeps every token
    seed: Optional[int] = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logits_hook: Optional[LogitsHook] = None
    fence: Optional[Fence] = None  # applied after the hook, so a hook cannot widen it
    # Report each sampled token's log-probability and this many top alternatives (None: none).
    logprobs: Optional[int] = None
    speculative: bool = True  # may be drafted when the engine speculates (never with a hook or logprobs)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not 0.0 <= self.temperature:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise ValueError(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")

    @property
    def greedy(self) -> bool:
        # Below this, dividing logits by the temperature overflows: it is argmax anyway.
        return self.temperature < 1e-5
