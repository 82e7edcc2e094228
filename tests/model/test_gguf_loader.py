"""GGUF checkpoints: logits equal transformers' own GGUF loading (``from_pretrained(gguf_file=)``)
for every supported tensor type and architecture, Llama's rope permutation is undone, and a
bad file is refused with an error naming the key or tensor before any weight is read."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import transformers
from gguf import GGMLQuantizationType as Q

from tests.model.gguf_models import QUANTIZABLE, RAW_ONLY, reference_model, write_model_gguf
from tests.model.tiny_models import SingleSequence
from zllm_core.model.config import CheckpointError
from zllm_core.model.loader import load_model
from zllm_core.model.model_names import resolve_model

TOKENS = [5, 17, 300, 2, 511, 42, 42, 7, 99, 128, 1, 64, 250, 3, 77, 400, 8, 9, 10, 200]
TYPES = sorted(QUANTIZABLE | RAW_ONLY, key=lambda t: t.name)


def logits_of(model, tokens=TOKENS) -> torch.Tensor:
    with torch.inference_mode():
        return SingleSequence(model, len(tokens)).step(tokens)


def transformers_logits(path, tokens=TOKENS) -> torch.Tensor:
    hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    with torch.no_grad():
        return hf.eval()(torch.tensor([tokens])).logits[0]


@pytest.fixture(scope="module")
def llama():
    return reference_model("llama")


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_every_tensor_type_matches_transformers(qtype, llama, tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", llama, qtype)
    model = load_model(path)
    assert model.config.quantization == qtype.name
    err = (logits_of(model) - transformers_logits(path)).abs().max().item()
    assert err <= 1e-4, f"{qtype.name}: max abs error {err}"


@pytest.mark.parametrize("arch, qtype", [("qwen2", Q.Q8_0), ("qwen3", Q.Q4_K)])
def test_qwen_architectures_match_transformers(arch, qtype, tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", reference_model(arch), qtype)
    model = load_model(path)
    assert model.config.architecture == {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]
    assert (model.lm_head is None) == (arch == "qwen2")  # no output.weight: the head is the embedding
    err = (logits_of(model) - transformers_logits(path)).abs().max().item()
    assert err <= 1e-4, f"{arch}: max abs error {err}"


def test_llama_rope_permutation_of_q_and_k_is_undone(llama, tmp_path):
    """Against the weights before conversion (not through any GGUF reader): q (9 rows per head
    pair over 4 heads) and k (over 2 KV heads) both come back in Hugging Face's order."""
    model = load_model(write_model_gguf(tmp_path / "m.gguf", llama, Q.F32))
    with torch.no_grad():
        expected = llama(torch.tensor([TOKENS])).logits[0]
    assert (logits_of(model) - expected).abs().max().item() <= 1e-5
    unpermuted = load_model(write_model_gguf(tmp_path / "raw.gguf", llama, Q.F32, permute_rope=False))
    assert (logits_of(unpermuted) - expected).abs().max().item() > 1e-2  # the permutation matters


def test_truncated_file_names_the_tensor(llama, tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", llama, Q.Q8_0)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 1000)
    with pytest.raises(CheckpointError, match=r"m.gguf: tensor '[\w.]+' ends at byte \d+, past the end of the file"):
        load_model(path)


def test_inconsistent_metadata_names_the_tensor(llama, tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", llama, metadata={"llama.feed_forward_length": 256})
    with pytest.raises(CheckpointError, match=r"tensor 'blk.0.ffn_gate.weight' has shape \(512, 256\), expected \(256, 256\)"):
        load_model(path)


def test_missing_tensor_is_named(llama, tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", llama, drop=("blk.1.ffn_up.weight",))
    with pytest.raises(CheckpointError, match=r"missing tensor for 'model.layers.1.mlp.up_proj.weight'"):
        load_model(path)


def test_unsupported_architecture_names_the_key(llama, tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", llama, architecture="gemma2")
    with pytest.raises(CheckpointError, match=r"key 'general.architecture' is 'gemma2': not supported"):
        load_model(path)


def test_unsupported_tensor_type_names_the_tensor(llama, tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", llama, Q.Q5_0)
    with pytest.raises(CheckpointError, match=r"tensor 'token_embd.weight' has type Q5_0; supported:"):
        load_model(path)


def test_missing_metadata_key_is_named(llama, tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", llama, metadata={"llama.block_count": None})
    with pytest.raises(CheckpointError, match=r"key 'llama.block_count' is missing"):
        load_model(path)


def test_not_a_gguf_file_is_refused(tmp_path):
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"GGUF" + bytes(20))
    with pytest.raises(CheckpointError, match=r"junk.gguf: not a readable GGUF file"):
        load_model(path)


def test_a_directory_holding_one_gguf_is_that_file(llama, tmp_path):
    path = write_model_gguf(tmp_path / "m.gguf", llama)
    assert resolve_model(tmp_path) == path
    shutil.copy(path, tmp_path / "n.gguf")
    with pytest.raises(CheckpointError, match=r"holds 2 .gguf files \(m.gguf, n.gguf\); pass the one to serve"):
        resolve_model(tmp_path)
