"""Synchronous offline API: ``LLM("zllm-demo").generate(["..."], SamplingParams(...))``."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Optional, Sequence, Union

from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.engine.output_processor import OutputProcessor
from zllm_core.engine.sampling_params import SamplingParams

Prompt = Union[str, Sequence[int]]


@dataclass(frozen=True)
class Completion:
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    cached_tokens: int


class LLM:
    def __init__(self, model: str = "zllm-demo", **config):
        self.engine = LLMEngine.from_config(EngineConfig(model=model, **config))
        self.tokenizer = self.engine.tokenizer
        self._ids = itertools.count()

    def encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, allowed_special="all")
        return list(prompt)

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]],
                 params: Optional[SamplingParams] = None) -> list[Completion]:
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        params = params or SamplingParams()
        encoded = [self.encode(p) for p in prompts]
        order = [f"llm-{next(self._ids)}" for _ in encoded]
        added = []
        try:
            for rid, ids in zip(order, encoded):
                self.engine.add_request(rid, ids, replace(params))
                added.append(rid)
        except ValueError:
            for rid in added:  # all or nothing: no orphan requests left queued
                self.engine.abort(rid)
            raise
        processors = {rid: OutputProcessor(self.tokenizer.decode_bytes, params.stop) for rid in order}
        tokens = {rid: [] for rid in order}
        texts = {rid: [] for rid in order}
        done = {}
        while len(done) < len(order):
            for out in self.engine.step():
                event = processors[out.request_id].process(out)
                tokens[out.request_id] += event.token_ids
                texts[out.request_id].append(event.text)
                if event.finish_reason is not None:
                    done[out.request_id] = event
                    if not out.finished:
                        self.engine.abort(out.request_id, "stop")
        return [Completion(ids, tokens[rid], "".join(texts[rid]), done[rid].finish_reason,
                           done[rid].cached_tokens) for rid, ids in zip(order, encoded)]
