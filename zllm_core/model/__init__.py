"""zllm_core.model"""
