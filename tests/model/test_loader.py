"""Loading checkpoints: extra tensors ignored, a progress bar for large ones, and broken or unsupported
ones refused with an error naming the file and what is wrong."""
import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from zllm_core.model.config import CheckpointError
from zllm_core.model.loader import load_model


@pytest.fixture
def copy_of(tiny_checkpoints, tmp_path):
    def copy(arch: str):
        dst = tmp_path / arch
        shutil.copytree(tiny_checkpoints[arch][0], dst)
        return dst
    return copy


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    (path / "config.json").write_text(json.dumps(config))


def test_missing_shard_names_the_shard(copy_of):
    path = copy_of("qwen2")
    (path / "model-00003-of-00011.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model.safetensors.index.json.*'model-00003-of-00011.safetensors'"):
        load_model(path)


def test_missing_tensor_names_tensor_and_file(copy_of):
    path = copy_of("qwen3")
    weights = load_file(path / "model.safetensors")
    del weights["model.layers.1.self_attn.k_norm.weight"]
    save_file(weights, path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model.safetensors: missing tensor 'model.layers.1.self_attn.k_norm"):
        load_model(path)


def test_tensor_missing_from_its_indexed_shard_names_the_shard(copy_of):
    path = copy_of("qwen2")
    index = json.loads((path / "model.safetensors.index.json").read_text())
    shard = path / index["weight_map"]["model.norm.weight"]
    weights = load_file(shard)
    del weights["model.norm.weight"]
    save_file(weights, shard)
    with pytest.raises(CheckpointError, match=rf"{shard.name}: missing tensor 'model.norm.weight'"):
        load_model(path)


def test_extra_tensors_are_ignored(copy_of):
    path = copy_of("qwen3")
    weights = load_file(path / "model.safetensors")
    weights["model.layers.0.self_attn.rotary_emb.inv_freq"] = weights["model.norm.weight"][:8].clone()
    save_file(weights, path / "model.safetensors")
    assert load_model(path).config.num_layers == 2


@pytest.mark.parametrize("arch, changes, message", [
    ("llama", {"hidden_size": None}, r"config.json: field 'hidden_size' is missing"),
    ("llama", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}},
     r"config.json: field 'rope_parameters.rope_type' 'yarn' is not supported"),
    ("qwen2", {"num_key_value_heads": 3},
     r"config.json: field 'num_key_value_heads' \(3\) must divide num_attention_heads \(4\)"),
    # The config and the weights disagree: the first mismatching tensor is named with both shapes.
    ("llama", {"intermediate_size": 128},
     r"model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' has shape \(64, 96\), expected \(64, 128\)"),
], ids=["missing-field", "rope-type", "head-counts", "shape"])
def test_bad_config_names_file_and_field(copy_of, arch, changes, message):
    path = copy_of(arch)
    _edit_config(path, **changes)
    with pytest.raises(CheckpointError, match=message):
        load_model(path)


def test_missing_directory_and_config_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="neither a model directory nor a .gguf file"):
        load_model(tmp_path / "nope")
    with pytest.raises(CheckpointError, match=r"config.json: file not found"):
        load_model(tmp_path)


def test_missing_weights_file_is_named(copy_of):
    path = copy_of("qwen3")
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="neither model.safetensors nor model.safetensors.index.json"):
        load_model(path)


def test_corrupt_safetensors_is_named(copy_of):
    path = copy_of("qwen3")
    (path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(CheckpointError, match="model.safetensors: not a readable safetensors file"):
        load_model(path)


def test_tensor_in_two_shards_is_refused(copy_of):
    path = copy_of("qwen2")
    index = json.loads((path / "model.safetensors.index.json").read_text())
    first, second = sorted(set(index["weight_map"].values()))[:2]
    extra = load_file(path / first)
    save_file({**load_file(path / second), **extra}, path / second)
    name = sorted(extra)[0]
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' also appears in .*{first}"):
        load_model(path)


def test_progress_bar_only_for_large_checkpoints(tiny_checkpoints, monkeypatch, capsys):
    from zllm_core.model import loader

    path = tiny_checkpoints["qwen2"][0]
    load_model(path)
    assert "Loading weights" not in capsys.readouterr().err
    monkeypatch.setattr(loader, "PROGRESS_BYTES", 0)
    load_model(path)
    assert "Loading weights" in capsys.readouterr().err
