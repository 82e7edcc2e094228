"""Runs one scheduled batch through the model over the KV storage it owns; returns logits."""
from __future__ import annotations

import torch

from zllm_core.cache.kv_storage import KVStorage
from zllm_core.engine.scheduler import Batch
from zllm_core.engine.step_inputs import InputBuffers
from zllm_core.model.attention_backend import AttentionBackend, ForwardContext
from zllm_core.model.causal_lm import CausalLM


class ModelRunner:
    def __init__(self, model: CausalLM, storage: KVStorage, backend: AttentionBackend, device: torch.device,
                 max_num_seqs: int, max_model_len: int, max_num_batched_tokens: int):
        if device.type == "cpu":
            model.prepack()  # weights in oneDNN's layout (see model/cpu_linear.py); idempotent
        self.model = model
        self.storage = storage
        self.backend = backend
        bs = storage.layout.block_size
        max_blocks = min(-(-max_model_len // bs), storage.num_blocks)
        self.inputs = InputBuffers(max_num_seqs, max_blocks, max_num_batched_tokens, bs, device)

    def run(self, batch: Batch) -> torch.Tensor:
        """Run the step; return fp32 logits for the chunks that sample, in chunk order."""
        step = self.inputs.prepare(batch)
        ctx = ForwardContext(step.meta, self.storage.kv_caches, self.backend, step.split)
        hidden = self.model(step.input_ids, step.positions, ctx)
        return self.model.compute_logits(hidden[step.sample_rows])
