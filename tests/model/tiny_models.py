"""Tiny random Hugging Face models and a one-sequence driver over a real block pool."""
from __future__ import annotations

import torch
import transformers

from zllm_core.cache.kv_storage import KVLayout, KVStorage
from zllm_core.model.attention_backend import AttentionMetadata, ForwardContext
from zllm_core.model.causal_lm import CausalLM
from zllm_core.model.torch_attention import TorchAttention

BLOCK_SIZE = 16
COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)

# Each variant exercises something the others do not.
VARIANTS = {
    # llama3 rope scaling (with frequencies in all three bands), biases on q/k/v and o, untied head.
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(
        attention_bias=True, rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 32})),
    # q/k/v bias without o bias, tied embeddings, sharded checkpoint.
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    # q/k norm, head_dim independent of hidden_size / heads.
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, dict(head_dim=32)),
}
SHARDED = {"qwen2"}


def build_reference(arch: str, seed: int = 0) -> transformers.PreTrainedModel:
    """A transformers model with every parameter random (HF init leaves biases zero, norms one)."""
    config_cls, model_cls, extra = VARIANTS[arch]
    config = config_cls(**COMMON, **extra)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.1)
    return model


class SingleSequence:
    """Feeds one sequence through ``CausalLM`` chunk by chunk, its KV in scattered pool blocks."""

    def __init__(self, model: CausalLM, max_tokens: int):
        cfg = model.config
        layout = KVLayout(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, model.dtype, BLOCK_SIZE)
        n_blocks = -(-max_tokens // BLOCK_SIZE)
        self.storage = KVStorage(layout, 2 * n_blocks + 1)
        # Every other block, reversed: the block table, not adjacency, must decide where KV lives.
        self.blocks = list(range(2 * n_blocks, -1, -2))[:n_blocks]
        self.model = model
        self.length = 0

    def step(self, token_ids: list[int]) -> torch.Tensor:
        """Logits ``[len(token_ids), vocab]`` for the new tokens, after all earlier ones."""
        n = len(token_ids)
        positions = torch.arange(self.length, self.length + n)
        table = torch.tensor(self.blocks, dtype=torch.int64)
        slots = table[positions // BLOCK_SIZE] * BLOCK_SIZE + positions % BLOCK_SIZE
        self.length += n
        meta = AttentionMetadata(
            query_start_loc=torch.tensor([0, n], dtype=torch.int32),
            seq_lens=torch.tensor([self.length], dtype=torch.int32),
            block_tables=table.to(torch.int32)[None],
            slot_mapping=slots,
            max_query_len=n,
            max_seq_len=self.length,
        )
        ctx = ForwardContext(meta, self.storage.kv_caches, TorchAttention())
        hidden = self.model(torch.tensor(token_ids), positions, ctx)
        return self.model.compute_logits(hidden)
