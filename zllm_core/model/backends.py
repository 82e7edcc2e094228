"""Which attention backend serves a device: one place that knows every backend.

The backends import the seam (``attention_backend``); only this module imports them, so
imports run one way.  Each is imported when chosen: Triton and the CUDA extension are
optional, and importing triton decides whether its interpreter is on.
"""
from __future__ import annotations

import importlib.util
import os

import torch

from zllm_core.model.attention_backend import AttentionBackend
from zllm_core.model.native_decode import native_entry


def select_backend(device: torch.device, name: str = "auto") -> AttentionBackend:
    """The backend called ``name`` for ``device``; ``auto`` picks the fastest that fits.

    ``auto`` is the Triton kernels on CUDA (when triton is installed), the native CPU decode
    and prefill kernels on a CPU (when the extension is built), else the torch reference.  ``cuda`` decodes
    with the native kernel (prefill stays on Triton) and needs an extension built with nvcc.
    ``triton`` on a CPU runs in Triton's interpreter, which must be switched on
    (TRITON_INTERPRET=1) before triton is first imported: slow, but exact, for tests.
    """
    if name == "auto":
        name = "torch"
        if device.type == "cuda" and importlib.util.find_spec("triton"):
            name = "triton"
        elif device.type == "cpu" and native_entry("paged_prefill_cpu") is not None:
            name = "cpu"
    if name == "torch":
        from zllm_core.model.torch_attention import TorchAttention
        return TorchAttention()
    if name == "cpu" and device.type == "cpu":
        from zllm_core.model.cpu_attention import CpuAttention
        return CpuAttention()
    if name == "triton" and (device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"):
        from zllm_core.model.triton_attention import TritonAttention
        return TritonAttention()
    if name == "cuda" and device.type == "cuda":
        from zllm_core.model.cuda_attention import CudaAttention
        return CudaAttention()
    raise ValueError(f"attention backend {name!r} is not available on {device}")
