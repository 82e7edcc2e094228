"""zllm_core.dialects"""
