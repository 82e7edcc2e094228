"""Adapters for servers that keep their own runtime: each module wraps one zllm_core piece in the
shape another stack expects (a transformers logits processor, a FastAPI router, a vLLM-style
tokenizer frontend). They are imported on use, so `import zllm_core` pulls in none of those stacks."""
