"""One request's token state as the scheduler and runner see it."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Optional

import numpy as np
import torch

from zllm_core.cache.prefix_cache import CacheRequest
from zllm_core.cache.block_table import BlockTable
from zllm_core.cache.token_ids import TOKEN_DTYPE, JoinedTokens, TokenIds, frozen_tokens
from zllm_core.engine.ngram_drafter import Drafter
from zllm_core.engine.sampling_params import SamplingParams


class Status(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass(eq=False)
class Sequence:
    request_id: str
    prompt: np.ndarray  # int32 ids, read-only: held as given when frozen (the tokenizer's), never copied
    params: SamplingParams
    arrival: int
    status: Status = Status.WAITING
    block_table: BlockTable = field(default_factory=BlockTable)
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
    # The outputs, then any draft, in a growable array after the prompt: a 300K-token prompt
    # is not copied to make room for them (see JoinedTokens).
    _out: np.ndarray = field(init=False, repr=False)
    last_token: int = field(init=False)  # the token a decode runs, kept as an int (no buffer read)
    num_draft: int = field(init=False, default=0)  # proposed tokens after the end of the buffer's tokens

    def __post_init__(self) -> None:
        self.prompt = frozen_tokens(self.prompt)
        self.prompt_len = self.num_tokens = len(self.prompt)
        self._out = np.empty(min(self.params.max_tokens, 256), dtype=TOKEN_DTYPE)
        self.last_token = int(self.prompt[-1])

    @property
    def token_ids(self) -> TokenIds:
        """Prompt and outputs so far, read-only: the prompt itself until the first output."""
        if self.num_tokens == self.prompt_len:
            return self.prompt
        out = self._out[:self.num_output]
        out.flags.writeable = False
        return JoinedTokens(self.prompt, out)

    @property
    def draft(self) -> np.ndarray:
        return self._out[self.num_output:self.num_output + self.num_draft]

    def token_at(self, i: int) -> int:
        """Token ``i`` (a draft's included), without building a view of them all."""
        if i == self.num_tokens - 1:
            return self.last_token
        return int(self.prompt[i] if i < self.prompt_len else self._out[i - self.prompt_len])

    def ids(self, start: int, length: int) -> np.ndarray:
        """Tokens ``start:start + length`` to run, the draft's included."""
        return JoinedTokens(self.prompt, self._out[:self.num_output + self.num_draft])[start:start + length]

    def append(self, token: int) -> None:
        n = self.num_tokens - self.prompt_len  # once per token of every decode: no property calls
        if n == len(self._out):
            self._reserve(1)
        self._out[n] = token
        self.num_tokens += 1
        self.num_draft = 0
        self.last_token = token

    def propose(self, draft: np.ndarray) -> None:
        """Tokens the next step verifies after the last one (kept past the end, not appended)."""
        self._reserve(len(draft))
        self._out[self.num_output:self.num_output + len(draft)] = draft
        self.num_draft = len(draft)

    def _reserve(self, n: int) -> None:
        if self.num_output + n > len(self._out):
            grown = np.empty(2 * (self.num_output + n), dtype=TOKEN_DTYPE)
            grown[:self.num_output] = self._out[:self.num_output]
            self._out = grown

    @property
    def num_uncomputed(self) -> int:
        """Tokens still to run through the model; exactly 1 while decoding."""
        return self.num_tokens - self.num_computed

    @property
    def num_output(self) -> int:
        return self.num_tokens - self.prompt_len
