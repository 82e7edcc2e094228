"""The ASGI app: one engine, three protocols.

`create_app` takes a running engine and the prompt builder for its model; every route converts
its protocol to the canonical form, goes through the same `Generation`, and encodes the result
back into its protocol. `protocol_routes` is the protocols alone, for any app to mount.
"""
from __future__ import annotations

import contextlib
from datetime import datetime, timezone
from typing import Any, AsyncIterator

from fastapi import APIRouter, Depends, FastAPI, Response

from zllm_core.server import chat_completions, errors, messages, openapi, responses, responses_socket
from zllm_core.server.access_log import AccessLog
from zllm_core.server.gate import Gate
from zllm_core.server.metrics import CONTENT_TYPE, ServerMetrics
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.runtime import Runtime, ServerConfig


def protocol_routes(rt: Runtime) -> APIRouter:
    """Chat Completions, Responses (HTTP and WebSocket) and Messages over `rt`."""
    router = APIRouter(dependencies=[Depends(rt.bind)])
    for module in (chat_completions, responses, responses_socket, messages):
        router.include_router(module.router)
    return router


def create_app(engine: Any, prompts: PromptBuilder, config: ServerConfig) -> FastAPI:
    """`engine` is an AsyncEngine or anything with its `generate`, `metrics` and `max_model_len`
    (and `forget`, to release an evicted conversation's terminal states in its prefix cache)."""
    max_len = min(config.max_model_len or engine.max_model_len, engine.max_model_len)
    metrics = ServerMetrics(engine.metrics, prompts.metrics)
    rt = Runtime.build(config, engine.generate, lambda: engine.model_config.eos_token_ids, prompts, max_len,
                       metrics, getattr(engine, "forget", None))
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        rt.store.close()  # its WAL checkpointed into the file: a clean file for whoever opens it next

    app = FastAPI(title="zllm", version="0.1.0", lifespan=lifespan)
    app.state.runtime = rt  # for whoever holds the app
    openapi.install(app, config.model_name, secured=bool(config.api_keys))
    errors.install(app, lambda path: openapi.methods_at(app, path))
    app.include_router(protocol_routes(rt))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "requests_running": rt.generation.running}

    @app.get("/metrics")
    async def prometheus() -> Response:
        """Prometheus text: the counters below, and TTFT / inter-token / duration histograms."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get("/metrics.json")
    async def counters() -> dict[str, Any]:
        """The engine's scheduler, KV pool and prefix-cache counters, and the incremental
        tokenizer's, as one JSON object."""
        return {**engine.metrics(), "tokenizer": prompts.metrics()}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        # One body both SDKs read: OpenAI's list fields and Anthropic's page fields.
        mc = engine.model_config
        model = {"id": config.model_name, "object": "model", "created": rt.created,
                 "owned_by": "zllm", "max_model_len": max_len, "type": "model",
                 "display_name": config.model_name,
                 "created_at": datetime.fromtimestamp(rt.created, timezone.utc).isoformat(),
                 # The card: what the model was trained for and how its source file stores it.
                 "context_length": mc.max_position_embeddings, "architecture": mc.architecture,
                 "quantization": mc.quantization}
        return {"object": "list", "data": [model], "has_more": False,
                "first_id": config.model_name, "last_id": config.model_name}

    # Added last runs first: the access log sees every request, the gate's refusals included.
    app.add_middleware(Gate, api_keys=config.api_keys, max_body_bytes=config.max_body_bytes)
    app.add_middleware(AccessLog, metrics=metrics)
    return app
