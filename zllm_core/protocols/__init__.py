"""zllm_core.protocols"""
