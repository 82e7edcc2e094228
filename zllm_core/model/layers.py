"""The building blocks every supported decoder shares: RMSNorm, rotary positions, the gated MLP.

Numerics follow the Hugging Face reference on purpose (norm statistics in fp32, rotary
angles in fp32 then cast), so logits agree with transformers to rounding.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from zllm_core.model.config import ModelConfig, RopeScaling
from zllm_core.model.cpu_linear import PackedLinear, can_prepack, packed

# A checkpoint tensor's destination: rows of a (possibly fused) parameter.
Targets = dict[str, tuple[torch.Tensor, slice]]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return self.weight * normed.to(x.dtype)


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None) -> torch.Tensor:
    """fp32 ``[head_dim // 2]`` angular frequencies, llama3-rescaled when asked."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if scaling is None:
        return inv_freq
    # Llama 3: long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    old_len = scaling.original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / scaling.low_freq_factor, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    blended = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = (wavelen >= old_len / scaling.high_freq_factor) & (wavelen <= old_len / scaling.low_freq_factor)
    return torch.where(medium, blended, scaled)


class RotaryEmbedding(nn.Module):
    """cos/sin for arbitrary positions, computed per step (cheap next to the matmuls, no table to size).

    The frequencies are not a buffer: models are built on the meta device and materialised
    empty, so they are computed on first use, on the device of the positions.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.head_dim, self.theta, self.scaling = config.head_dim, config.rope_theta, config.rope_scaling
        self.inv_freq: torch.Tensor | None = None

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``[T, 1, head_dim // 2]`` cos and sin, broadcast over heads."""
        if self.inv_freq is None or self.inv_freq.device != positions.device:
            self.inv_freq = rope_inv_freq(self.head_dim, self.theta, self.scaling).to(positions.device)
        angles = positions.float()[:, None] * self.inv_freq[None, :]
        return angles.cos().to(dtype)[:, None, :], angles.sin().to(dtype)[:, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``[T, heads, head_dim]`` by position, halves layout (x1, x2) as in HF's rotate_half."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class GatedMLP(nn.Module):
    """SwiGLU; the gate and up projections are one parameter, ``[gate; up]`` by rows, run as
    one matmul (on CUDA a launch saved per layer).

    ``prepack`` (CPU, after loading) packs the halves as two projections: the element-wise
    ``silu(gate) * up`` then reads two contiguous tensors instead of every other half-row of
    one, about 10% of a 16 x 256-token SmolLM2 prefill.
    """

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_up_proj: Optional[nn.Linear] = nn.Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.down_proj: nn.Module = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.gate_and_up: Optional[nn.ModuleList] = None  # once packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_and_up is not None:
            gate, up = (proj(x) for proj in self.gate_and_up)
        else:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)

    def prepack(self) -> None:
        if self.gate_up_proj is None or not can_prepack(self.gate_up_proj.weight):
            return
        weight, size = self.gate_up_proj.weight, self.down_proj.in_features
        self.gate_and_up = nn.ModuleList([PackedLinear(weight[:size]), PackedLinear(weight[size:])])
        self.gate_up_proj = None
        self.down_proj = packed(self.down_proj)

    def checkpoint_targets(self, prefix: str) -> Targets:
        size = self.down_proj.in_features
        return {
            f"{prefix}gate_proj.weight": (self.gate_up_proj.weight, slice(0, size)),
            f"{prefix}up_proj.weight": (self.gate_up_proj.weight, slice(size, 2 * size)),
            f"{prefix}down_proj.weight": (self.down_proj.weight, slice(None)),
        }
