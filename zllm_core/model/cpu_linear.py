"""Projections on a CPU through oneDNN, each weight reordered once into its blocked layout.

``F.linear`` on a CPU is MKL's sgemm over the dense weight, re-laid-out on every call; on
this project's AMD hosts it also picks a slower kernel.  oneDNN's linear over a prepacked
weight made SmolLM2 about 10% faster to prefill and 30% faster to decode at batch 16
(bench/engine.py).  Only float32 weights are packed (bf16/fp16 matmuls without hardware
support would be emulated); the packed copy replaces the dense one.
"""
from __future__ import annotations

import os
from typing import Optional

import torch
from torch import nn

# oneDNN keeps each primitive it creates (descriptor and JIT-compiled kernels, ~0.45 MiB with
# both caches) in two LRU caches keyed by shape, its own and ideep's inside torch, 1024 entries
# each by default. A server's row counts (batch sizes, prefill chunks, drafts) keep taking new
# values, so at the default its RSS grew ~1 MiB a request, toward ~450 MiB more (issue 28).
# Both read their capacity from the environment once, at first use: set here, before any
# oneDNN call, unless the operator set them. 256 entries bound them to ~115 MiB and hold ~50
# batch sizes of a model's ~5 projection shapes; a miss costs a few ms of kernel generation.
PRIMITIVE_CACHE_CAPACITY = 256
if not any(f"{prefix}PRIMITIVE_CACHE_CAPACITY" in os.environ for prefix in ("ONEDNN_", "DNNL_")):
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(PRIMITIVE_CACHE_CAPACITY)
os.environ.setdefault("LRU_CACHE_CAPACITY", str(PRIMITIVE_CACHE_CAPACITY))


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
