"""zllm_core.cache"""
