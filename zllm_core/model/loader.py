"""Build a ``CausalLM`` from a Hugging Face model directory or a GGUF file (or a name, see model_names).

The module is built on the meta device (initialisers skipped) and materialised empty, so no
time is spent on random initialisation; every parameter is then filled from the safetensors files, and a
checkpoint that does not fill every parameter exactly once is refused.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from tqdm import tqdm

from zllm_core.model.causal_lm import CausalLM, meta_model
from zllm_core.model.config import DTYPES, CheckpointError, ModelConfig
from zllm_core.model.gguf import gguf_config, load_gguf_weights
from zllm_core.model.gguf_file import GGUFFile, is_gguf, open_gguf
from zllm_core.model.layers import Targets
from zllm_core.model.model_names import resolve_model

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PROGRESS_BYTES = 1 << 30  # show a progress bar for checkpoints past 1 GiB


def _open(model_dir: str | Path) -> tuple[Path, GGUFFile | None, ModelConfig]:
    path = resolve_model(model_dir)
    gguf = open_gguf(path) if is_gguf(path) else None
    return path, gguf, gguf_config(gguf) if gguf else ModelConfig.from_dir(path)


def read_config(model_dir: str | Path) -> ModelConfig:
    """The architecture alone (no tensor is read): what a caller checks before loading."""
    return _open(model_dir)[2]


def load_model(model_dir: str | Path, dtype: torch.dtype | str | None = None,
               device: torch.device | str = "cpu") -> CausalLM:
    """``dtype`` defaults to the checkpoint's ``torch_dtype`` (float32 for GGUF files)."""
    path, gguf, config = _open(model_dir)
    dtype = _resolve_dtype(dtype, config)
    model = _empty(meta_model(config).to(dtype), device)
    if gguf:
        load_gguf_weights(model, gguf)
    else:
        load_weights(model, path)
    return model.requires_grad_(False).eval()


def _empty(model: CausalLM, device: torch.device | str) -> CausalLM:
    """``to_empty`` by shape and dtype: torch's own runs meta decompositions that import sympy
    (half a second of every start)."""
    return model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))


def _resolve_dtype(dtype: torch.dtype | str | None, config: ModelConfig) -> torch.dtype:
    if dtype is None:
        return config.torch_dtype
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
        return DTYPES[dtype]
    if dtype not in DTYPES.values():
        raise ValueError(f"dtype {dtype} is not supported (float32, bfloat16, float16)")
    return dtype


def checkpoint_shards(model_dir: Path) -> tuple[list[Path], dict[str, Path] | None]:
    """The safetensors files to read, and for a sharded checkpoint which file its index names per tensor."""
    index_path = model_dir / INDEX_FILE
    if not index_path.is_file():
        single = model_dir / SINGLE_FILE
        if not single.is_file():
            raise CheckpointError(f"{model_dir}: neither {SINGLE_FILE} nor {INDEX_FILE} found")
        return [single], None
    try:
        weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(f"{index_path}: field 'weight_map' is missing or not valid JSON ({e!r})") from e
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index_path}: field 'weight_map' must map tensor names to file names")
    files = {name: model_dir / name for name in sorted(set(weight_map.values()))}
    for name, shard in files.items():
        if not shard.is_file():
            raise CheckpointError(f"{index_path}: shard '{name}' listed in weight_map is missing ({shard})")
    return list(files.values()), {tensor: files[name] for tensor, name in weight_map.items()}


def load_weights(model: CausalLM, model_dir: Path) -> None:
    """Copy each checkpoint tensor into its (row slice of a) parameter; extra tensors are ignored."""
    shards, weight_map = checkpoint_shards(model_dir)
    targets = model.checkpoint_targets()
    large = sum(s.stat().st_size for s in shards) > PROGRESS_BYTES
    loaded: dict[str, Path] = {}
    with tqdm(total=len(targets), desc="Loading weights", unit="tensor", disable=not large) as bar:
        for shard in shards:
            _load_shard(shard, targets, loaded, model.device, bar)
    missing = [name for name in targets if name not in loaded]
    if missing:
        where = weight_map.get(missing[0], model_dir / INDEX_FILE) if weight_map else shards[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{where}: missing tensor '{missing[0]}'{more}")


def _load_shard(shard: Path, targets: Targets, loaded: dict[str, Path], device: torch.device, bar: tqdm) -> None:
    try:
        with safe_open(str(shard), framework="pt", device=str(device)) as f:
            for name in f.keys():
                if name not in targets:
                    continue
                if name in loaded:
                    raise CheckpointError(f"{shard}: tensor '{name}' also appears in {loaded[name]}")
                param, rows = targets[name]
                dest = param.data[rows]
                shape = tuple(f.get_slice(name).get_shape())
                if shape != tuple(dest.shape):
                    raise CheckpointError(f"{shard}: tensor '{name}' has shape {shape}, expected {tuple(dest.shape)}")
                dest.copy_(f.get_tensor(name))
                loaded[name] = shard
                bar.update()
    except SafetensorError as e:
        raise CheckpointError(f"{shard}: not a readable safetensors file ({e})") from e
