"""Triton kernels, shipped as ``zllm_core.kernels``."""
