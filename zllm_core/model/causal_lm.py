"""A decoder-only language model over flattened tokens and a paged KV cache."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zllm_core.model.attention_backend import ForwardContext
from zllm_core.model.config import ModelConfig
from zllm_core.model.cpu_linear import PackedLinear, can_prepack
from zllm_core.model.decoder import DecoderLayer
from zllm_core.model.layers import RMSNorm, RotaryEmbedding, Targets


class CausalLM(nn.Module):
    """Embeddings, the decoder stack, the final norm and the LM head.

    ``forward`` takes every new token of a step (all sequences flattened) and returns their
    final hidden states; the runner picks the rows it needs and calls ``compute_logits``,
    so the vocabulary projection runs only for tokens that are sampled.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rotary = RotaryEmbedding(config)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(
            config.hidden_size, config.vocab_size, bias=False)
        self.packed_head: PackedLinear | None = None

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """``input_ids`` and ``positions`` are ``[T]``; returns normed hidden states ``[T, hidden]``."""
        h = self.embed_tokens(input_ids)
        rope = self.rotary(positions, h.dtype)
        for layer in self.layers:
            h = layer(h, rope, ctx)
        return self.norm(h)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[N, hidden]`` -> float32 ``[N, vocab]``."""
        if self.packed_head is not None:
            return self.packed_head(hidden).float()
        return F.linear(hidden, self._head_weight()).float()

    def _head_weight(self) -> torch.Tensor:
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def prepack(self) -> None:
        """Reorder the float32 projections of a CPU model for oneDNN (see cpu_linear), once,
        after loading: the dense copies are dropped, so no checkpoint loads into it after.
        A tied head packs a copy of the embeddings (which the lookup still reads)."""
        for layer in self.layers:
            layer.prepack()
        if self.packed_head is None and can_prepack(self._head_weight()):
            self.packed_head, self.lm_head = PackedLinear(self._head_weight()), None

    def checkpoint_targets(self) -> Targets:
        """Every tensor a Hugging Face checkpoint must provide, and where it goes."""
        if self.packed_head is not None:
            raise RuntimeError("this model's projections are prepacked: load the checkpoint before prepack()")
        targets: Targets = {
            "model.embed_tokens.weight": (self.embed_tokens.weight, slice(None)),
            "model.norm.weight": (self.norm.weight, slice(None)),
        }
        if self.lm_head is not None:
            targets["lm_head.weight"] = (self.lm_head.weight, slice(None))
        for i, layer in enumerate(self.layers):
            targets.update(layer.checkpoint_targets(f"model.layers.{i}."))
        return targets


def meta_model(config: ModelConfig) -> CausalLM:
    """The module on the meta device, its initialisers skipped: shapes only, for weights to fill
    (on meta, torch's initialisers import torch._dynamo: seconds of every server's start)."""
    with torch.device("meta"), _SkipInit():
        return CausalLM(config)


class _SkipInit(torch.overrides.TorchFunctionMode):
    """Calls to ``torch.nn.init`` return their tensor untouched."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)
