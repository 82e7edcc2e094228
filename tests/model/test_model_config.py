"""config.json (both the transformers 4 and 5 spellings) and generation_config.json parse to one ModelConfig."""
from pathlib import Path

import pytest
import torch

from zllm_core.model.config import CheckpointError, RopeScaling, parse_config

DIR = Path("ckpt")
LLAMA = {"architectures": ["LlamaForCausalLM"], "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
         "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
         "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "eos_token_id": 7, "bos_token_id": 1}
LLAMA3 = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)


def test_legacy_rope_fields_and_transformers5_rope_parameters_agree():
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    legacy = parse_config({**LLAMA, "rope_theta": 500000.0, "rope_scaling": {"type": "llama3", **scaling},
                           "torch_dtype": "bfloat16"}, {}, DIR)
    current = parse_config({**LLAMA, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, **scaling},
                            "dtype": "bfloat16"}, {}, DIR)
    assert legacy == current
    assert legacy.rope_theta == 500000.0 and legacy.rope_scaling == LLAMA3
    assert legacy.torch_dtype == torch.bfloat16


def test_defaults_when_optional_fields_are_absent():
    config = parse_config(LLAMA, {}, DIR)
    assert config.head_dim == 8 and config.rope_theta == 10000.0 and config.rope_scaling is None
    assert config.torch_dtype == torch.float32 and not config.tie_word_embeddings
    assert (config.qk_norm, config.attention_bias, config.o_bias) == (False, False, False)


def test_generation_config_eos_list_overrides_config():
    assert parse_config(LLAMA, {}, DIR).eos_token_ids == (7,)
    assert parse_config(LLAMA, {"eos_token_id": [7, 9]}, DIR).eos_token_ids == (7, 9)
    assert parse_config(LLAMA, {"eos_token_id": None}, DIR).eos_token_ids == (7,)
    assert parse_config({**LLAMA, "eos_token_id": None}, {}, DIR).eos_token_ids == ()


def test_architecture_decides_biases_and_qk_norm():
    qwen2 = parse_config({**LLAMA, "architectures": ["Qwen2ForCausalLM"]}, {}, DIR)
    assert (qwen2.qk_norm, qwen2.attention_bias, qwen2.o_bias) == (False, True, False)
    qwen3 = parse_config({**LLAMA, "architectures": ["Qwen3ForCausalLM"], "head_dim": 32}, {}, DIR)
    assert (qwen3.qk_norm, qwen3.head_dim) == (True, 32)
    by_type = parse_config({**LLAMA, "architectures": None, "model_type": "qwen2"}, {}, DIR)
    assert by_type.architecture == "Qwen2ForCausalLM"


@pytest.mark.parametrize("changes, message", [
    ({"architectures": ["MistralForCausalLM"]}, r"field 'architectures' \['MistralForCausalLM'\] is not supported"),
    ({"architectures": ["Qwen3ForCausalLM"]}, r"field 'head_dim' is missing"),
    ({"num_attention_heads": 6, "num_key_value_heads": 4}, r"field 'num_key_value_heads' \(4\) must divide"),
    ({"num_attention_heads": 7, "num_key_value_heads": 7}, r"field 'hidden_size' \(64\) is not divisible"),
    ({"vocab_size": "128"}, r"field 'vocab_size' must be int, got '128'"),
    ({"num_hidden_layers": 0}, r"field 'num_hidden_layers' must be positive"),
    ({"torch_dtype": "float8"}, r"field 'torch_dtype' 'float8' is not one of"),
    ({"hidden_act": "gelu"}, r"field 'hidden_act' 'gelu' is not supported"),
    ({"use_sliding_window": True}, r"field 'use_sliding_window' is true"),
    ({"quantization_config": {"quant_method": "awq"}}, r"field 'quantization_config' is set"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, r"field 'rope_scaling.rope_type' 'dynamic'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, r"field 'rope_scaling.low_freq_factor' is missing"),
])
def test_invalid_config_names_file_and_field(changes, message):
    with pytest.raises(CheckpointError, match=r"ckpt/config.json: " + message):
        parse_config({**LLAMA, **changes}, {}, DIR)


def test_invalid_generation_config_names_its_file():
    with pytest.raises(CheckpointError, match=r"generation_config.json: field 'eos_token_id' must be an int or a list"):
        parse_config(LLAMA, {"eos_token_id": "</s>"}, DIR)
