"""The engine decodes the same greedy tokens with the Triton kernels as with the torch
reference, on the embedded demo model (Triton's interpreter on CPU: kept to a few tokens)."""
from paged_case import DEVICE
from zllm_core.cache.scope import Scope, model_manifest, tokenizer_manifest
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.model.demo import resolve_model_dir
from zllm_core.model.loader import load_model

# A 40-token prompt split by a 16-token step budget is one NewPrefill and two
# AppendPrefills; the short ones join later steps, so prefill and decode mix in a batch.
PROMPTS = [list(range(5, 45)), list(range(100, 103)), list(range(7, 30, 2))]


def greedy_tokens(model, model_dir, backend: str) -> dict[str, list[int]]:
    config = EngineConfig(device=DEVICE, attention_backend=backend, kv_cache_bytes=1 << 22,
                          max_num_batched_tokens=16)
    dtype = str(next(model.parameters()).dtype)
    scope = Scope(model_manifest(model_dir, dtype), tokenizer_manifest(model_dir))
    engine = LLMEngine(model, None, config, scope)  # token ids in and out: no tokenizer needed
    assert engine.runner.backend.name == backend
    tokens = {f"r{i}": [] for i in range(len(PROMPTS))}
    for rid, prompt in zip(tokens, PROMPTS):
        engine.add_request(rid, prompt, SamplingParams(temperature=0.0, max_tokens=5))
    finished = 0
    while finished < len(PROMPTS):
        for out in engine.step():
            tokens[out.request_id] += out.new_token_ids
            finished += out.finished
    return tokens


def test_triton_backend_decodes_the_reference_greedy_tokens():
    model_dir = resolve_model_dir("zllm-demo")
    model = load_model(model_dir, device=DEVICE)
    reference = greedy_tokens(model, model_dir, "torch")
    assert all(len(t) == 5 for t in reference.values())
    assert greedy_tokens(model, model_dir, "triton") == reference
