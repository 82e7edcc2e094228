"""The three protocols as a FastAPI router over the caller's own `generate`: another server
mounts Chat Completions, Responses and Messages without adopting zllm_core's engine.

It is the built-in server's own path (`protocol_routes`): the same request validation, prompt
rendering and incremental tokenization, fences, output parsing, stream encoders and errors.
What the built-in app adds around it (API keys, body limits, access log, metrics, /v1/models)
stays the caller's to choose.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

import numpy as np
from fastapi import APIRouter

from zllm_core.cache.scope import CacheHint
from zllm_core.engine.output_processor import GenerationEvent
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.server.app import protocol_routes
from zllm_core.server.metrics import ServerMetrics
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.runtime import Runtime, ServerConfig


class Generate(Protocol):
    """One request's output as a stream of events, the last with a `finish_reason`.

    `prompt_ids` are the exact prompt tokens (uint32); `params.fence`, when set, is the
    request's TokenFence, which the generator applies to its logits (see
    `zllm_core.adapters.transformers`) and advances with each sampled token. Closing the
    iterator early means the client went away: abort the request."""

    def __call__(self, prompt_ids: np.ndarray, params: SamplingParams, *, request_id: str,
                 cache: CacheHint) -> AsyncIterator[GenerationEvent]: ...


def protocol_router(generate: Generate, prompts: PromptBuilder, config: ServerConfig, *,
                    max_model_len: int, end_ids: Sequence[int]) -> APIRouter:
    """A router serving `config.model_name` over `generate`.

    `prompts` renders and tokenizes for the model (its chat template and tokenizer);
    `max_model_len` bounds prompt plus output; `end_ids` are the model's end-of-turn ids, which
    fences allow once a call or JSON value is complete. `config`'s API keys and body limit
    belong to the built-in app and are not applied here."""
    metrics = ServerMetrics(dict, prompts.metrics)  # its histograms fill; no caller scrapes them here
    ends = tuple(end_ids)
    return protocol_routes(Runtime.build(config, generate, lambda: ends, prompts, max_model_len, metrics))
