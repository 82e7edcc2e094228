"""Projections prepacked for oneDNN (what the engine runs on a CPU) against dense F.linear."""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tiny_models import SingleSequence

from zllm_core.model.cpu_linear import PackedLinear, can_prepack
from zllm_core.model.loader import load_model

REPO = Path(__file__).resolve().parents[2]
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


BOUNDED_CACHES = """
import ctypes, torch
from zllm_core.model.cpu_linear import PRIMITIVE_CACHE_CAPACITY as CAP, PackedLinear

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
def in_use():
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd

linear = PackedLinear(torch.randn(32, 32))
def run(rows):  # each row count is a new shape: a new primitive in each cache
    for n in rows:
        linear(torch.zeros(n, 32))
run([1])
start = in_use()
run(range(2, CAP // 2 + 2))
filling = in_use() - start  # CAP/2 new entries
run(range(CAP // 2 + 2, 2 * CAP))
full = in_use()
run(range(2 * CAP, 3 * CAP))  # CAP more, past the capacity
print(filling, in_use() - full)
"""


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="needs glibc's mallinfo2")
def test_onednn_primitive_caches_stay_bounded_as_row_counts_vary():
    """A fresh process, as a server starts: importing cpu_linear must bound oneDNN's caches
    before their first use, so new row counts past the capacity evict instead of growing the
    heap (at oneDNN's default of 1024 the last CAP shapes add about as much again as the first
    CAP/2: 69 against 71 MiB, where the bound adds 0)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("CACHE_CAPACITY")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", BOUNDED_CACHES], env=env, capture_output=True,
                         text=True, check=True).stdout
    filling, past_capacity = map(int, out.split())
    assert filling > 10 << 20  # the measure sees the cache: CAP/2 primitives weigh tens of MiB
    assert past_capacity < filling / 4
