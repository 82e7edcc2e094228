"""zllm-demo is a deterministic, self-healing Hugging Face directory that loads like any checkpoint."""
import json
import os

import pytest
import torch
from tiny_models import SingleSequence

from zllm_core.model.demo import DEMO_DIR, DEMO_NAME, MANIFEST, ensure_demo_model, is_complete
from zllm_core.model.model_names import resolve_model
from zllm_core.model.loader import load_model

HF_FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"}


def _listed(path) -> set[str]:
    return set(json.loads((path / MANIFEST).read_text()))


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    return ensure_demo_model(tmp_path_factory.mktemp("cache"))


def test_demo_is_built_once_and_reused(demo_dir):
    assert demo_dir.name == DEMO_DIR and is_complete(demo_dir)
    stamp = (demo_dir / "model.safetensors").stat().st_mtime_ns
    assert ensure_demo_model(demo_dir.parent) == demo_dir
    assert (demo_dir / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in demo_dir.parent.iterdir()] == [DEMO_DIR]  # no staging left behind


def test_demo_bytes_are_identical_across_builds(demo_dir, tmp_path):
    other = ensure_demo_model(tmp_path)
    assert HF_FILES <= _listed(demo_dir) == _listed(other)
    for name in _listed(demo_dir) | {MANIFEST}:
        assert (other / name).read_bytes() == (demo_dir / name).read_bytes(), name


def test_corrupt_demo_is_detected_and_rebuilt(demo_dir, tmp_path):
    path = ensure_demo_model(tmp_path)
    expected = (demo_dir / "model.safetensors").read_bytes()
    with open(path / "model.safetensors", "r+b") as f:
        f.seek(1000)
        f.write(b"\xff\xfe")
    assert not is_complete(path)
    assert ensure_demo_model(tmp_path) == path
    assert (path / "model.safetensors").read_bytes() == expected


def test_partial_demo_without_manifest_is_rebuilt(tmp_path):
    partial = tmp_path / DEMO_DIR
    partial.mkdir()
    (partial / "config.json").write_text("{}")
    assert ensure_demo_model(tmp_path) == partial
    assert is_complete(partial) and set(os.listdir(partial)) == _listed(partial) | {MANIFEST}


def test_demo_name_resolves_through_cache_env(demo_dir, monkeypatch):
    monkeypatch.setenv("ZLLM_CACHE_DIR", str(demo_dir.parent))
    assert resolve_model(DEMO_NAME) == demo_dir


@torch.inference_mode()
def test_demo_loads_and_generates_deterministically(demo_dir):
    model = load_model(demo_dir)
    cfg = model.config
    assert (cfg.architecture, cfg.vocab_size, cfg.hidden_size, cfg.num_layers) == ("Qwen3ForCausalLM", 151936, 256, 4)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.qk_norm) == (4, 2, 64, True)
    assert cfg.tie_word_embeddings and model.lm_head is None
    assert cfg.eos_token_ids == (151645, 151643) and cfg.bos_token_id is None
    tokenizer = json.loads((demo_dir / "tokenizer_config.json").read_text())
    assert tokenizer["zllm_tokenizer_family"] == "qwen2" and tokenizer["eos_token"] == "<|im_end|>"

    def greedy() -> list[int]:
        seq = SingleSequence(model, 24)
        logits = seq.step(list(range(100, 120)))
        out = []
        for _ in range(4):
            out.append(int(logits[-1].argmax()))
            logits = seq.step(out[-1:])
        return out

    tokens = greedy()
    assert tokens == greedy() and all(0 <= t < cfg.vocab_size for t in tokens)


@torch.inference_mode()
def test_transformers_loads_demo_and_agrees(demo_dir):
    """The demo is a real Hugging Face checkpoint, not something only zllm can read."""
    import transformers

    ref = transformers.AutoModelForCausalLM.from_pretrained(demo_dir).eval()
    prompt = list(range(151600, 151640))
    ours = SingleSequence(load_model(demo_dir), len(prompt)).step(prompt)
    assert (ours - ref(input_ids=torch.tensor([prompt])).logits[0]).abs().max() <= 1e-4
