"""The ingress: zllm's own app (create_app: the three protocols, the Responses WebSocket, SSE,
error shapes, API keys, access log, metrics) over `ClusterEngine`, which sends each request's
token ids to a replica through Ray Serve's handle and streams the engine's events back.

Prompts are built here: the chat template, the incremental tokenizer sessions and the
token-exact history of each conversation stay in one place whichever replica serves a turn,
and the router gets the request's token ids (and so its block keys) without a second
tokenization. One ingress replica keeps them whole; several share the response store (SQLite
on a shared path) but each keeps its own tokenizer sessions.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
from typing import Any, AsyncIterator, Optional, Sequence

import numpy as np
from fastapi import FastAPI
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from zllm_core.cache.scope import CacheHint
from zllm_core.cluster.fence_wire import FenceWire
from zllm_core.cluster.replica import EngineCall, RemoteEngineError, ReplicaInfo
from zllm_core.cluster.routers import router_for
from zllm_core.engine.async_engine import EngineError, EngineShutdown
from zllm_core.engine.output_processor import GenerationEvent
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.fence.tool_grammar import tags_for

ENGINE_DEPLOYMENT = "engine"


class ReplicaLost(EngineShutdown):
    """The replica serving a request stopped (killed, or shut down): the client may retry; the
    conversation's next turn goes to another replica, which restores it from the SSD tier."""

    def __init__(self, why: str):
        EngineError.__init__(self, f"the replica serving this request {why}; retry the request", refused=False)


class ClusterEngine:
    """What create_app needs of an engine (generate, metrics, max_model_len, model_config),
    over the replicas."""

    def __init__(self, handle: Any, info: ReplicaInfo, tags: Sequence[str]):
        self.handle = handle.options(stream=True)
        self.keys = info.keys
        self.max_model_len = info.max_model_len
        self.model_config = info.model_config
        self.tags = tuple(tags)
        self._started = info.metrics  # one replica's, until the router has heard from them all

    async def generate(self, prompt_ids: np.ndarray, params: SamplingParams, request_id: Optional[str] = None,
                       cache: CacheHint = CacheHint()) -> AsyncIterator[GenerationEvent]:
        fence = FenceWire.of(params.fence, self.tags) if params.fence is not None else None
        route = await asyncio.to_thread(self.keys.route, prompt_ids, cache)  # milliseconds of hashing
        call = EngineCall(np.asarray(prompt_ids), dataclasses.replace(params, fence=None), request_id, cache,
                          route, fence)
        started = False
        for attempt in (0, 1):  # a replica found dead before anything was sent: once more elsewhere
            try:
                async for event in self._stream(call):
                    started = True
                    yield event
                return
            except ReplicaLost:
                if started or attempt:
                    raise

    async def _stream(self, call: EngineCall) -> AsyncIterator[GenerationEvent]:
        stream = self.handle.generate.remote(call)
        finished = False
        try:
            async for event in stream:
                finished = event.finish_reason is not None
                yield event
        except RayTaskError as exc:
            cause = exc.cause
            if not isinstance(cause, RemoteEngineError):
                raise
            if cause.shutdown:
                raise ReplicaLost("is shutting down") from None
            raise EngineError(cause.message, cause.refused) from None
        except (RayActorError, ActorUnavailableError):
            raise ReplicaLost("stopped") from None
        finally:
            if not finished:  # the client went away (or the replica did): abort it there
                stream.cancel()

    def replicas(self) -> dict[str, dict[str, Any]]:
        router = router_for(ENGINE_DEPLOYMENT)
        return router.reports() if router is not None else {}

    def metrics(self) -> dict[str, Any]:
        """Every replica's engine counters summed (the rates recomputed from the sums)."""
        reported = [r["metrics"] for r in self.replicas().values() if "metrics" in r]
        return combine(reported) if reported else self._started

    def decisions(self) -> dict[str, int]:
        router = router_for(ENGINE_DEPLOYMENT)
        return dict(router.policy.decisions) if router is not None else {}


def combine(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    out = _sum(metrics)
    cache, spec = out.get("cache"), out.get("speculative")
    if cache:
        cache["token_hit_rate"] = cache["cached_tokens"] / cache["prompt_tokens"] if cache["prompt_tokens"] else 0.0
    if spec:
        spec["acceptance_rate"] = spec["accepted"] / spec["drafted"] if spec["drafted"] else 0.0
        spec["tokens_per_step"] = (spec["accepted"] + spec["steps"]) / spec["steps"] if spec["steps"] else 0.0
    return out


def _sum(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if isinstance(present[0], dict):
        keys = dict.fromkeys(k for v in present for k in v)
        return {k: _sum([v.get(k) for v in present]) for k in keys}
    return sum(present)


class Ingress:
    """The ingress deployment: Ray Serve builds its app (`__serve_build_asgi_app__`) after the
    constructor, which asks a replica how the engines key their blocks."""

    async def __init__(self, engines: Any, args: argparse.Namespace):
        from zllm_core.model.model_names import resolve_model
        from zllm_core.server.cli import server_config
        from zllm_core.server.prompt import PromptBuilder
        from zllm_core.tokenizer import Tokenizer

        info: ReplicaInfo = await engines.describe.remote()
        window = max(1, args.route_window_tokens // info.keys.block_size)
        info = dataclasses.replace(info, keys=dataclasses.replace(info.keys, window_blocks=window))
        model_dir = resolve_model(args.model)
        self.prompts = PromptBuilder.from_model_dir(model_dir, Tokenizer.from_pretrained(model_dir), args.tool_dialect,
                                                    args.conversation_bytes)
        self.engine = ClusterEngine(engines, info, tags_for(self.prompts.dialect))
        self.config = server_config(args)

    def __serve_build_asgi_app__(self) -> FastAPI:
        from zllm_core.server.app import create_app

        app = create_app(self.engine, self.prompts, self.config)
        engine = self.engine

        @app.get("/cluster")
        async def cluster() -> dict[str, Any]:
            """Each replica's pid, load, summary and counters, and the router's decisions."""
            replicas = {}
            for rid, r in engine.replicas().items():
                summary, cache = r.get("summary"), (r.get("metrics") or {}).get("cache") or {}
                replicas[rid] = {"pid": r.get("pid"), "in_flight": r["in_flight"],
                                 "resident_blocks": summary.blocks if summary else 0,
                                 "summary_level": summary.level if summary else 0,
                                 "summary_keys": summary.num_keys if summary else 0,
                                 "requests": cache.get("requests", 0),
                                 "cached_tokens": cache.get("cached_tokens", 0),
                                 "ssd": (r.get("metrics") or {}).get("ssd")}
            return {"replicas": replicas, "decisions": engine.decisions()}

        return app
