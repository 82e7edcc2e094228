"""The runtime computes the same logits as transformers, through the paged cache, in fp32."""
import inspect

import pytest
import torch
from tiny_models import VARIANTS, SingleSequence

from zllm_core.model.loader import load_model

TOL = 1e-4
PROMPT_LEN = 50  # spans four 16-token blocks
DECODE_STEPS = 32


def _prompt(vocab: int, seed: int = 1) -> list[int]:
    return torch.randint(0, vocab, (PROMPT_LEN,), generator=torch.Generator().manual_seed(seed)).tolist()


def _cache_kwarg(ref) -> str:
    """transformers 5 renamed ``past_key_values`` to ``cache``."""
    return "cache" if "cache" in inspect.signature(ref.forward).parameters else "past_key_values"


def _max_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return (ours - ref.float()).abs().max().item()


def _load(path, prepacked: bool):
    model = load_model(path)
    if prepacked:  # what the engine runs on a CPU (model/cpu_linear.py)
        model.prepack()
    return model


@pytest.mark.parametrize("prepacked", [False, True], ids=["dense", "prepacked"])
@pytest.mark.parametrize("arch", list(VARIANTS))
@torch.inference_mode()
def test_prefill_and_decode_match_transformers(arch, prepacked, tiny_checkpoints):
    path, ref = tiny_checkpoints[arch]
    model = _load(path, prepacked)
    prompt = _prompt(model.config.vocab_size)
    seq = SingleSequence(model, PROMPT_LEN + DECODE_STEPS)

    ours = seq.step(prompt)
    out = ref(input_ids=torch.tensor([prompt]), use_cache=True)
    assert ours.dtype == torch.float32 and ours.shape == (PROMPT_LEN, model.config.vocab_size)
    assert _max_err(ours, out.logits[0]) <= TOL
    assert ours.abs().max() > 1.0  # logits large enough that the tolerance means something

    cache_kwarg = _cache_kwarg(ref)
    for step in range(DECODE_STEPS):
        token = int(ours[-1].argmax())
        ours = seq.step([token])
        out = ref(input_ids=torch.tensor([[token]]), use_cache=True, **{cache_kwarg: out[1]})
        assert _max_err(ours, out.logits[0]) <= TOL, f"decode step {step}"


@pytest.mark.parametrize("prepacked", [False, True], ids=["dense", "prepacked"])
@pytest.mark.parametrize("arch", list(VARIANTS))
@torch.inference_mode()
def test_chunked_prefill_attends_to_cached_chunks(arch, prepacked, tiny_checkpoints):
    path, ref = tiny_checkpoints[arch]
    model = _load(path, prepacked)
    prompt = _prompt(model.config.vocab_size, seed=2)
    seq = SingleSequence(model, PROMPT_LEN)
    # Chunk borders inside and on block boundaries.
    ours = torch.cat([seq.step(prompt[:7]), seq.step(prompt[7:32]), seq.step(prompt[32:])])
    assert _max_err(ours, ref(input_ids=torch.tensor([prompt])).logits[0]) <= TOL


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@torch.inference_mode()
def test_half_precision_tracks_float32(dtype, tiny_checkpoints):
    path, _ = tiny_checkpoints["qwen3"]
    prompt = _prompt(512, seed=3)
    full = SingleSequence(load_model(path), PROMPT_LEN).step(prompt)
    half_model = load_model(path, dtype=dtype)
    assert half_model.dtype == getattr(torch, dtype)
    half = SingleSequence(half_model, PROMPT_LEN).step(prompt)
    assert half.dtype == torch.float32
    assert _max_err(half, full) < 0.1 * full.abs().max().item()
