"""Projections prepacked for oneDNN (what the engine runs on a CPU) against dense F.linear."""
import pytest
import torch
import torch.nn.functional as F
from tiny_models import SingleSequence

from zllm_core.model.cpu_linear import PackedLinear, can_prepack
from zllm_core.model.loader import load_model

pytestmark = pytest.mark.skipif(not can_prepack(torch.zeros(1)), reason="torch built without oneDNN")


@pytest.mark.parametrize("rows", [1, 7, 16, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_equals_f_linear(rows, bias):
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 64, generator=gen)
    b = torch.randn(96, generator=gen) if bias else None
    x = torch.randn(rows, 64, generator=gen)
    expected = F.linear(x, weight, b)
    out = PackedLinear(weight, b)(x)
    assert out.shape == expected.shape and out.dtype == torch.float32 and not out.is_mkldnn
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@torch.inference_mode()
def test_prepack_drops_the_dense_weights_once_and_refuses_a_later_checkpoint(tiny_checkpoints):
    path, _ = tiny_checkpoints["llama"]  # untied head, biases
    model = load_model(path)
    prompt = list(range(3, 40))
    dense = SingleSequence(model, len(prompt)).step(prompt)
    dense_count = sum(p.numel() for p in model.parameters())
    model.prepack()
    model.prepack()  # idempotent
    mlp = model.layers[0].mlp
    assert mlp.gate_up_proj is None and all(isinstance(p, PackedLinear) for p in mlp.gate_and_up)
    assert isinstance(model.layers[0].self_attn.qkv_proj, PackedLinear) and model.lm_head is None
    # Only embeddings and norms stay dense parameters (and the q/k/v biases, as plain tensors).
    assert sum(p.numel() for p in model.parameters()) < dense_count / 2
    torch.testing.assert_close(SingleSequence(model, len(prompt)).step(prompt), dense, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="load the checkpoint before prepack"):
        model.checkpoint_targets()


def test_half_precision_models_stay_dense(tiny_checkpoints):
    path, _ = tiny_checkpoints["qwen3"]
    model = load_model(path, dtype="bfloat16")
    model.prepack()
    assert model.packed_head is None and model.layers[0].mlp.gate_up_proj is not None
