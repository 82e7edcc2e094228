"""Projections on a CPU through oneDNN, each weight reordered once into its blocked layout.

``F.linear`` on a CPU is MKL's sgemm over the dense weight, re-laid-out on every call; on
this project's AMD hosts it also picks a slower kernel.  oneDNN's linear over a prepacked
weight made SmolLM2 about 10% faster to prefill and 30% faster to decode at batch 16
(bench/engine.py).  Only float32 weights are packed (bf16/fp16 matmuls without hardware
support would be emulated); the packed copy replaces the dense one.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn


def can_prepack(weight: torch.Tensor) -> bool:
    return (weight.device.type == "cpu" and weight.dtype == torch.float32
            and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class PackedLinear(nn.Module):
    """``x @ weight.T + bias`` with the weight held only in oneDNN's layout."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        # A plain attribute, not a parameter: an opaque oneDNN tensor has no strides to save or move.
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), None)
        self.bias = None if bias is None else bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def packed(linear: nn.Module) -> nn.Module:
    """``linear`` as a PackedLinear when its weight can be packed; otherwise unchanged."""
    if isinstance(linear, nn.Linear) and can_prepack(linear.weight):
        return PackedLinear(linear.weight, linear.bias)
    return linear
