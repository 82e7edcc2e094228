"""Triton kernels, shipped as ``zllm_core.kernels``."""
from .paged_decode import DecodeSplit, paged_decode, plan_splits, target_programs
from .paged_prefill import paged_prefill
from .paged_tile import LOG2E
from .token_bitmask import apply_token_bitmask

__all__ = ["LOG2E", "DecodeSplit", "apply_token_bitmask", "paged_decode", "paged_prefill", "plan_splits",
           "target_programs"]
