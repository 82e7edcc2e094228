"""zllm_core.tokenizer: exact byte-level BPE (tiktoken families, Hugging Face tokenizer.json)."""
from zllm_core.tokenizer.rules import Rules, UnsupportedTokenizer
from zllm_core.tokenizer.tokenizer import Tokenizer

__all__ = ["Rules", "Tokenizer", "UnsupportedTokenizer"]
