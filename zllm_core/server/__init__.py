"""zllm_core.server"""
