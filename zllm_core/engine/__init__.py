"""zllm_core.engine"""
