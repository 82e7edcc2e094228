"""The one decoder layer behind Llama, Qwen2 and Qwen3.

The three differ only in attention details carried by ``ModelConfig``: Qwen2 has q/k/v
biases, Qwen3 normalises each q and k head.  Projections are fused (one qkv matmul, one
gate_up parameter, see GatedMLP); the checkpoint's separate tensors are loaded into row
slices of them.
"""
from __future__ import annotations

import torch
from torch import nn

from zllm_core.model.attention_backend import ForwardContext
from zllm_core.model.config import ModelConfig
from zllm_core.model.cpu_linear import packed
from zllm_core.model.layers import GatedMLP, RMSNorm, Targets, apply_rotary


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.layer_index = layer_index
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.q_size = config.num_heads * config.head_dim
        self.kv_size = config.num_kv_heads * config.head_dim
        self.scale = config.head_dim ** -0.5
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=config.attention_bias)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=config.o_bias)
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if config.qk_norm else None

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], ctx: ForwardContext) -> torch.Tensor:
        n = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(n, self.num_heads, self.head_dim)
        k = k.view(n, self.num_kv_heads, self.head_dim)
        v = v.view(n, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        out = ctx.attend(self.layer_index, q, k, v, self.scale)
        return self.o_proj(out.reshape(n, self.q_size))

    def prepack(self) -> None:
        self.qkv_proj, self.o_proj = packed(self.qkv_proj), packed(self.o_proj)

    def checkpoint_targets(self, prefix: str) -> Targets:
        rows = {"q": slice(0, self.q_size), "k": slice(self.q_size, self.q_size + self.kv_size),
                "v": slice(self.q_size + self.kv_size, self.q_size + 2 * self.kv_size)}
        targets: Targets = {f"{prefix}{p}_proj.weight": (self.qkv_proj.weight, r) for p, r in rows.items()}
        if self.qkv_proj.bias is not None:
            targets.update({f"{prefix}{p}_proj.bias": (self.qkv_proj.bias, r) for p, r in rows.items()})
        targets[f"{prefix}o_proj.weight"] = (self.o_proj.weight, slice(None))
        if self.o_proj.bias is not None:
            targets[f"{prefix}o_proj.bias"] = (self.o_proj.bias, slice(None))
        if self.q_norm is not None:
            targets[f"{prefix}q_norm.weight"] = (self.q_norm.weight, slice(None))
            targets[f"{prefix}k_norm.weight"] = (self.k_norm.weight, slice(None))
        return targets


class DecoderLayer(nn.Module):
    """Pre-norm attention then pre-norm MLP, each with a residual connection."""

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_index)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size)

    def forward(self, h: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], ctx: ForwardContext) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), rope, ctx)
        return h + self.mlp(self.post_attention_layernorm(h))

    def prepack(self) -> None:
        self.self_attn.prepack()
        self.mlp.prepack()

    def checkpoint_targets(self, prefix: str) -> Targets:
        return {
            f"{prefix}input_layernorm.weight": (self.input_layernorm.weight, slice(None)),
            f"{prefix}post_attention_layernorm.weight": (self.post_attention_layernorm.weight, slice(None)),
            **self.self_attn.checkpoint_targets(f"{prefix}self_attn."),
            **self.mlp.checkpoint_targets(f"{prefix}mlp."),
        }
