"""zllm_core.tokenizer"""
