"""One engine (one device, or a share of the CPU) as a Ray Serve replica.

It takes token ids and sampling parameters and streams the engine's events: the protocols,
prompts and tokenizer sessions stay at the ingress. It publishes what the router needs every
routing period (Ray Serve's `record_routing_stats`): a `BlockSummary` of its resident prefix
blocks and its engine counters. With a shared SSD directory it writes finished requests
through to it, so a conversation that moves, or outlives this replica, restores elsewhere.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional

import numpy as np
import torch

from zllm_core.cache.scope import CacheHint
from zllm_core.cluster.fence_wire import FenceBuilder, FenceWire
from zllm_core.cluster.policy import Route, RouteKeys
from zllm_core.cluster.summary import BlockSummary
from zllm_core.engine.async_engine import AsyncEngine, EngineError, EngineShutdown
from zllm_core.engine.output_processor import GenerationEvent
from zllm_core.engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class EngineCall:
    """One request as it crosses to a replica (its fence as a FenceWire, rebuilt there)."""

    prompt_ids: np.ndarray
    params: SamplingParams
    request_id: str
    cache: CacheHint
    route: Route  # for the router, which reads it from the pending request
    fence: Optional[FenceWire] = None


class RemoteEngineError(Exception):
    """An EngineError as it crosses back (EngineError's constructor does not take its args,
    so it cannot be unpickled)."""

    def __init__(self, message: str, refused: bool, shutdown: bool):
        super().__init__(message, refused, shutdown)
        self.message, self.refused, self.shutdown = message, refused, shutdown


@dataclass(frozen=True)
class ReplicaInfo:
    """What the ingress needs of the engines: their keying, limits and model card."""

    keys: RouteKeys
    max_model_len: int
    model_config: Any
    metrics: dict[str, Any]


class EngineReplica:
    def __init__(self, model: str, engine_options: dict[str, Any], cpu_threads: int = 0):
        """`engine_options`: EngineConfig fields; `cpu_threads` > 0 caps torch's threads (N CPU
        replicas on one host would otherwise each take every core)."""
        if cpu_threads:
            torch.set_num_threads(cpu_threads)
        self.engine = AsyncEngine.from_model(model, **engine_options)
        self.cache = self.engine.engine.kv.cache
        ssd = self.cache.ssd if self.cache is not None else None
        if ssd is not None:
            # The switch lives on the tier's config; EngineConfig has no flag for it yet.
            ssd.config = dataclasses.replace(ssd.config, write_through=True)
        self.fences = FenceBuilder(self.engine.tokenizer)

    def describe(self) -> ReplicaInfo:
        engine = self.engine.engine
        keys = RouteKeys(engine.scope, engine.config.block_size, engine.config.block_hash)
        return ReplicaInfo(keys, self.engine.max_model_len, self.engine.model_config, self.metrics())

    async def generate(self, call: EngineCall) -> AsyncIterator[GenerationEvent]:
        params = call.params if call.fence is None else dataclasses.replace(
            call.params, fence=self.fences.build(call.fence))
        try:
            async for event in self.engine.generate(call.prompt_ids, params, request_id=call.request_id,
                                                    cache=call.cache):
                yield event
        except EngineError as exc:
            raise RemoteEngineError(str(exc), exc.refused, isinstance(exc, EngineShutdown)) from None

    def metrics(self) -> dict[str, Any]:
        return self.engine.metrics()

    def record_routing_stats(self) -> dict[str, Any]:
        """Ray Serve asks every routing period; the router in each ingress reads it."""
        summary = BlockSummary.of(self.cache.index.keys()) if self.cache is not None else None
        return {"summary": summary, "metrics": self.metrics(), "pid": os.getpid()}

    def __del__(self) -> None:
        """Ray Serve's graceful stop: end what runs, back resident state up to the SSD tier."""
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
