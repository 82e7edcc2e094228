"""What a Hugging Face checkpoint directory says about its model, validated once at load time.

Llama, Qwen2 and Qwen3 share one decoder; their configs differ only in which attention
projections carry a bias and whether q/k get an RMSNorm.  Anything this runtime cannot
reproduce exactly (other rope types, sliding windows, quantisation) is refused by name
rather than run approximately.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from zllm_core.model.checkpoint_error import CheckpointError

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3 frequency-dependent scaling of the rotary inverse frequencies."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rope_theta: float
    rope_scaling: RopeScaling | None  # None is the default (unscaled) rope
    rms_norm_eps: float
    tie_word_embeddings: bool
    qk_norm: bool  # Qwen3: RMSNorm over each q and k head before rotary
    attention_bias: bool  # bias on the q, k and v projections
    o_bias: bool  # bias on the output projection
    torch_dtype: torch.dtype
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    quantization: str | None = None  # how the source file stores the weights (GGUF: "Q4_1"); None: unquantised

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> "ModelConfig":
        model_dir = Path(model_dir)
        raw = _read_json(model_dir / "config.json", required=True)
        generation = _read_json(model_dir / "generation_config.json", required=False)
        return parse_config(raw, generation, model_dir)


def _read_json(path: Path, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path}: file not found")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


class _Fields:
    """Typed reads from one JSON object, with errors that name the file and the field."""

    def __init__(self, raw: dict[str, Any], path: Path, prefix: str = ""):
        self.raw, self.path, self.prefix = raw, path, prefix

    def fail(self, field: str, problem: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: field '{self.prefix}{field}' {problem}")

    def get(self, field: str, kind: type, default: Any = ...) -> Any:
        value = self.raw.get(field)
        if value is None:
            if default is ...:
                raise self.fail(field, "is missing")
            return default
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(field, f"must be {kind.__name__}, got {value!r}")
        return value

    def positive(self, field: str, default: Any = ...) -> int:
        value = self.get(field, int, default)
        if value <= 0:
            raise self.fail(field, f"must be positive, got {value}")
        return value

    def token_ids(self, field: str) -> tuple[int, ...]:
        value = self.raw.get(field)
        ids = [] if value is None else value if isinstance(value, list) else [value]
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise self.fail(field, f"must be an int or a list of ints, got {value!r}")
        return tuple(ids)


def parse_config(raw: dict[str, Any], generation: dict[str, Any], model_dir: Path,
                 source: Path | None = None) -> ModelConfig:
    """``source`` names the file errors blame (default: the directory's config.json)."""
    f = _Fields(raw, source or model_dir / "config.json")
    architecture = _architecture(f)
    _refuse_unsupported(f)
    num_heads = f.positive("num_attention_heads")
    num_kv_heads = f.positive("num_key_value_heads", num_heads)
    if num_heads % num_kv_heads:
        raise f.fail("num_key_value_heads", f"({num_kv_heads}) must divide num_attention_heads ({num_heads})")
    hidden_size = f.positive("hidden_size")
    head_dim = _head_dim(f, architecture, hidden_size, num_heads)
    rope_theta, rope_scaling = _rope(f)
    dtype_field = "dtype" if raw.get("torch_dtype") is None else "torch_dtype"  # transformers 5 writes "dtype"
    dtype_name = f.get(dtype_field, str, "float32")
    if dtype_name not in DTYPES:
        raise f.fail(dtype_field, f"{dtype_name!r} is not one of {sorted(DTYPES)}")
    qwen2 = architecture == "Qwen2ForCausalLM"
    bias = f.get("attention_bias", bool, False)
    gen = _Fields(generation, model_dir / "generation_config.json")
    eos = gen.token_ids("eos_token_id") if generation.get("eos_token_id") is not None else f.token_ids("eos_token_id")
    return ModelConfig(
        architecture=architecture,
        vocab_size=f.positive("vocab_size"),
        hidden_size=hidden_size,
        intermediate_size=f.positive("intermediate_size"),
        num_layers=f.positive("num_hidden_layers"),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        max_position_embeddings=f.positive("max_position_embeddings"),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        rms_norm_eps=f.get("rms_norm_eps", float),
        tie_word_embeddings=f.get("tie_word_embeddings", bool, False),
        qk_norm=architecture == "Qwen3ForCausalLM",
        attention_bias=qwen2 or bias,  # Qwen2 always has q/k/v bias and never an o bias
        o_bias=bias and not qwen2,
        torch_dtype=DTYPES[dtype_name],
        eos_token_ids=eos,
        bos_token_id=f.get("bos_token_id", int, None),
    )


def _architecture(f: _Fields) -> str:
    names = f.raw.get("architectures")
    if names is None:
        by_type = {v: k for k, v in ARCHITECTURES.items()}
        model_type = f.get("model_type", str)
        if model_type not in by_type:
            raise f.fail("model_type", f"{model_type!r} is not supported (supported: {sorted(by_type)})")
        return by_type[model_type]
    if not isinstance(names, list) or len(names) != 1 or names[0] not in ARCHITECTURES:
        raise f.fail("architectures", f"{names!r} is not supported (supported: {sorted(ARCHITECTURES)})")
    return names[0]


def _refuse_unsupported(f: _Fields) -> None:
    """Options that would change the computation in ways this runtime does not implement."""
    if f.raw.get("quantization_config") is not None:
        raise f.fail("quantization_config", "is set: quantised checkpoints are not supported")
    if f.raw.get("hidden_act", "silu") != "silu":
        raise f.fail("hidden_act", f"{f.raw['hidden_act']!r} is not supported (supported: 'silu')")
    if f.raw.get("mlp_bias"):
        raise f.fail("mlp_bias", "is true: MLP biases are not supported")
    if f.raw.get("use_sliding_window"):
        raise f.fail("use_sliding_window", "is true: sliding-window attention is not supported")


def _head_dim(f: _Fields, architecture: str, hidden_size: int, num_heads: int) -> int:
    if architecture == "Qwen3ForCausalLM" or f.raw.get("head_dim") is not None:
        # Qwen3's head_dim is independent of hidden_size, so it must be stated.
        return f.positive("head_dim")
    if hidden_size % num_heads:
        raise f.fail("hidden_size", f"({hidden_size}) is not divisible by num_attention_heads ({num_heads})")
    return hidden_size // num_heads


def _rope(f: _Fields) -> tuple[float, RopeScaling | None]:
    """Old checkpoints write rope_theta + rope_scaling; transformers >= 5 writes rope_parameters."""
    field = "rope_parameters" if f.raw.get("rope_parameters") is not None else "rope_scaling"
    params = f.raw.get(field) or {}
    if not isinstance(params, dict):
        raise f.fail(field, f"must be an object, got {params!r}")
    theta = params.get("rope_theta", f.raw.get("rope_theta", 10000.0))
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or theta <= 0:
        raise f.fail("rope_theta", f"must be a positive number, got {theta!r}")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise f.fail(f"{field}.partial_rotary_factor", "is not supported (only 1.0)")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return float(theta), None
    if kind != "llama3":
        raise f.fail(f"{field}.rope_type", f"{kind!r} is not supported (supported: 'default', 'llama3')")
    sub = _Fields(params, f.path, prefix=f"{field}.")
    scaling = RopeScaling(
        factor=sub.get("factor", float),
        low_freq_factor=sub.get("low_freq_factor", float),
        high_freq_factor=sub.get("high_freq_factor", float),
        original_max_position_embeddings=sub.positive("original_max_position_embeddings"),
    )
    if scaling.high_freq_factor <= scaling.low_freq_factor:
        raise f.fail(f"{field}.high_freq_factor", "must be greater than low_freq_factor")
    return float(theta), scaling
