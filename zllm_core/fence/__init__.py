"""zllm_core.fence"""
