"""One request's token state as the scheduler and runner see it."""
from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from enum import Enum, auto
from typing import Optional

import numpy as np
import torch

from zllm_core.cache.prefix_cache import CacheRequest
from zllm_core.cache.token_ids import TOKEN_DTYPE, TokenIds
from zllm_core.engine.ngram_drafter import Drafter
from zllm_core.engine.sampling_params import SamplingParams


class Status(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass(eq=False)
class Sequence:
    request_id: str
    prompt: InitVar[TokenIds]
    params: SamplingParams
    arrival: int
    status: Status = Status.WAITING
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0  # leading tokens whose K/V sit in block_table
    num_cached: int = 0  # of those, how many were adopted from the prefix cache
    finish_reason: Optional[str] = None
    generator: Optional[torch.Generator] = None
    matched: bool = False  # looked up in the prefix cache at least once
    cache: Optional[CacheRequest] = None  # None: this request neither reads nor feeds the cache
    drafter: Optional[Drafter] = None  # None: no speculation for this request
    num_drafted: int = 0  # draft tokens verified so far
    num_accepted: int = 0  # of those, how many the model agreed with
    prompt_len: int = field(init=False)
    num_tokens: int = field(init=False)
    # Prompt then outputs in one growable array: the prompt is copied in once, and the cache
    # and runner read slices of it without building Python ints.
    _buffer: np.ndarray = field(init=False, repr=False)
    last_token: int = field(init=False)  # the token a decode runs, kept as an int (no buffer read)
    num_draft: int = field(init=False, default=0)  # proposed tokens after the end of the buffer's tokens

    def __post_init__(self, prompt: TokenIds) -> None:
        self.prompt_len = self.num_tokens = len(prompt)
        self._buffer = np.empty(self.prompt_len + min(self.params.max_tokens, 256), dtype=TOKEN_DTYPE)
        self._buffer[:self.prompt_len] = prompt
        self.last_token = int(self._buffer[self.prompt_len - 1])

    @property
    def token_ids(self) -> np.ndarray:
        """Prompt and outputs so far, as a read-only view."""
        view = self._buffer[:self.num_tokens]
        view.flags.writeable = False
        return view

    @property
    def draft(self) -> np.ndarray:
        return self._buffer[self.num_tokens:self.num_tokens + self.num_draft]

    def token_at(self, i: int) -> int:
        """Token ``i`` (a draft's included), without building a view of them all."""
        return self.last_token if i == self.num_tokens - 1 else int(self._buffer[i])

    def ids(self, start: int, length: int) -> np.ndarray:
        """Tokens ``start:start + length`` to run, the draft's included."""
        return self._buffer[start:start + length]

    def append(self, token: int) -> None:
        self._reserve(1)
        self._buffer[self.num_tokens] = token
        self.num_tokens += 1
        self.num_draft = 0
        self.last_token = token

    def propose(self, draft: np.ndarray) -> None:
        """Tokens the next step verifies after the last one (kept past the end, not appended)."""
        self._reserve(len(draft))
        self._buffer[self.num_tokens:self.num_tokens + len(draft)] = draft
        self.num_draft = len(draft)

    def _reserve(self, n: int) -> None:
        if self.num_tokens + n > len(self._buffer):
            grown = np.empty(2 * (self.num_tokens + n), dtype=TOKEN_DTYPE)
            grown[:self.num_tokens] = self._buffer[:self.num_tokens]
            self._buffer = grown

    @property
    def num_uncomputed(self) -> int:
        """Tokens still to run through the model; exactly 1 while decoding."""
        return self.num_tokens - self.num_computed

    @property
    def num_output(self) -> int:
        return self.num_tokens - self.prompt_len
