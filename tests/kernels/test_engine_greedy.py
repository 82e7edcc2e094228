"""The engine decodes the same greedy tokens with the Triton kernels as with the torch
reference, on the embedded demo model (Triton's interpreter on CPU: kept to a few tokens)."""
from paged_case import DEVICE
from zllm_core.engine.llm import LLM
from zllm_core.engine.sampling_params import SamplingParams

# With a 16-token step budget the long prompts arrive as a NewPrefill followed by
# AppendPrefills that cross block boundaries, while the short one is already decoding.
PROMPTS = [
    "Write a haiku about caches.",
    "The quick brown fox jumps over the lazy dog, then the dog chases the fox around the "
    "yard twice before both of them fall asleep under the old oak tree.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint(fib(",
]


def greedy_tokens(backend: str) -> list[list[int]]:
    llm = LLM("zllm-demo", device=DEVICE, attention_backend=backend, kv_cache_bytes=1 << 22,
              max_num_batched_tokens=16)
    assert llm.engine.runner.backend.name == backend
    return [c.token_ids for c in llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=5))]


def test_triton_backend_decodes_the_reference_greedy_tokens():
    reference = greedy_tokens("torch")
    assert [len(t) for t in reference] == [5, 5, 5]
    assert greedy_tokens("triton") == reference
