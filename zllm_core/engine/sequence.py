"""One request's token state as the scheduler and runner see it."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Optional

import torch

from zllm_core.cache.prefix_cache import CacheRequest
from zllm_core.engine.sampling_params import SamplingParams


class Status(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass(eq=False)
class Sequence:
    request_id: str
    token_ids: list[int]
    prompt_len: int
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

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_uncomputed(self) -> int:
        """Tokens still to run through the model; exactly 1 while decoding."""
        return len(self.token_ids) - self.num_computed

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.prompt_len:]

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.prompt_len

    def blocks_needed(self, upto: int, block_size: int) -> int:
        """New blocks required to hold K/V of the first ``upto`` tokens."""
        return max(0, -(-upto // block_size) - len(self.block_table))
