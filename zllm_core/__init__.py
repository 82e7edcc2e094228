"""zllm_core: a serving engine for coding agents."""
__version__ = "0.1.0"
