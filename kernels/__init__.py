"""Triton kernels, shipped as ``zllm_core.kernels``."""
from .paged_decode import DecodeSplit, paged_decode, plan_splits, target_programs
from .paged_prefill import paged_prefill
from .paged_tile import LOG2E

__all__ = ["LOG2E", "DecodeSplit", "paged_decode", "paged_prefill", "plan_splits", "target_programs"]
