"""An engine for server benchmarks at contexts the model cannot run here: LLMEngine's real
bookkeeping (add_request, the scheduler's prefix match and block allocation, the prefix
cache's commits and terminal sessions) with the model never run.

`generate` schedules the prompt's first chunk (the time of that is `marked`), then finishes
the turn in bookkeeping only: the prompt committed, `answer` appended as the generated
tokens, all but the last committed as decoding would, and the request finished.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from zllm_core.cache.scope import CacheHint, Scope
from zllm_core.engine.async_engine import prompt_snapshot
from zllm_core.engine.output_processor import GenerationEvent
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.model.causal_lm import CausalLM
from zllm_core.model.config import parse_config
from zllm_core.model.demo import CONFIG, GENERATION_CONFIG


def bench_engine(context: int) -> LLMEngine:
    """A real engine over a one-layer model that is never run: its KV pool is tiny per token,
    so a pool for several 300K-token contexts costs megabytes."""
    raw = {**CONFIG, "hidden_size": 16, "intermediate_size": 16, "num_attention_heads": 1,
           "num_key_value_heads": 1, "head_dim": 16, "num_hidden_layers": 1,
           "max_position_embeddings": 4 * context}
    model = CausalLM(parse_config(raw, GENERATION_CONFIG, Path("bench")))
    per_token = 2 * 16 * 4  # K and V, one head of 16 fp32
    config = EngineConfig(kv_cache_bytes=3 * context * per_token, max_num_batched_tokens=4 * context)
    return LLMEngine(model, None, config, Scope("bench-request-overhead"))


class BookkeepingEngine:
    """What create_app needs of an engine."""

    def __init__(self, engine: LLMEngine, answer: list[int], decode=lambda ids: ""):
        self.engine, self.answer, self.decode = engine, answer, decode
        self.marked = 0  # process CPU ns when the last request's first chunk was scheduled
        self.stages: dict[str, float] = {}  # the last request's engine stages, CPU ms
        self.prompt = np.zeros(0, np.uint32)  # the last request's prompt ids
        self.model_config = engine.model.config
        self.max_model_len = engine.max_model_len

    def metrics(self) -> dict:
        return self.engine.metrics()

    async def generate(self, prompt_ids, params, request_id=None, cache=CacheHint()):
        clock = [time.process_time_ns()]
        ids = self.prompt = prompt_snapshot(prompt_ids)  # as AsyncEngine.generate takes it
        clock.append(time.process_time_ns())
        self.engine.add_request(request_id, ids, params, cache)
        clock.append(time.process_time_ns())
        (chunk,) = self.engine.scheduler.schedule().chunks
        self.marked = time.process_time_ns()
        clock.append(self.marked)
        seq = chunk.seq
        for token in self.answer:
            seq.append(token)
        kv = self.engine.kv
        assert kv.grow(seq.block_table, seq.num_tokens)  # the blocks decoding would have taken
        seq.num_computed = seq.num_tokens - 1  # the last sampled token is never run
        clock.append(time.process_time_ns())
        kv.commit(request_id, seq.token_ids, seq.block_table, seq.num_computed)
        self.engine.scheduler.finish(seq, "stop")
        clock.append(time.process_time_ns())
        ms = np.diff(clock) / 1e6  # ms[3]: the answer appended, as the model would have
        self.stages = {"snapshot": ms[0], "add_request": ms[1], "schedule": ms[2], "finish": ms[4]}
        yield GenerationEvent(list(self.answer), self.decode(self.answer[:-1]), "stop", None,
                              seq.prompt_len, seq.num_cached, len(self.answer))
