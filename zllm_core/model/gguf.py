"""GGUF checkpoints (llama.cpp's single-file format) as the same ``ModelConfig`` and parameters
a Hugging Face directory gives.

The metadata (``llama.block_count``, ...) is translated into the config.json fields
``parse_config`` validates, and every tensor is renamed to its Hugging Face name and filled
into ``CausalLM.checkpoint_targets()``, so both formats build the same model.  Two things
differ from safetensors: weights are stored quantised (dequantised here, see gguf_quants.py),
and llama.cpp's converter permutes the rows of Llama's q and k projections so that rotary
pairs are adjacent (GGML's "normal" rope); that permutation is undone.  Qwen2/Qwen3 use the
halves layout in both runtimes and are stored as is.  Every check (names, types, shapes,
extents) runs before the first tensor is dequantised.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from tqdm import tqdm

from zllm_core.model.causal_lm import CausalLM
from zllm_core.model.config import CheckpointError, ModelConfig, parse_config
from zllm_core.model.gguf_file import GGUFFile
from zllm_core.model.gguf_quants import SUPPORTED, dequantize

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
ROPE_PERMUTED = {"llama"}  # architectures whose q/k rows llama.cpp's converter interleaves
PROGRESS_BYTES = 64 << 20  # dequantising takes seconds past this

_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
# Metadata keys that change the computation in ways this runtime does not implement.
_REFUSED_KEYS = ("expert_count", "attention.sliding_window", "rope.scaling.type")


def hf_name(gguf_name: str) -> str | None:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``; None if not a known tensor."""
    stem, _, kind = gguf_name.rpartition(".")
    if kind not in ("weight", "bias"):
        return None
    if stem in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[stem]}.{kind}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{kind}"
    return None


def gguf_config(file: GGUFFile) -> ModelConfig:
    arch = file.architecture
    if arch not in ARCHITECTURES:
        raise file.fail("general.architecture", f"is {arch!r}: not supported (supported: {sorted(ARCHITECTURES)})")
    for key in _REFUSED_KEYS:
        value = file.get(f"{arch}.{key}", object, None)
        if value not in (None, 0, "none"):
            raise file.fail(f"{arch}.{key}", f"is {value!r}: not supported")
    if "rope_freqs.weight" in file.tensors:
        raise CheckpointError(f"{file.path}: tensor 'rope_freqs.weight' (per-frequency rope factors) is not supported")
    heads = file.get(f"{arch}.attention.head_count", int)
    hidden = file.get(f"{arch}.embedding_length", int)
    head_dim = file.get(f"{arch}.attention.key_length", int, hidden // heads if heads else 0)
    if file.get(f"{arch}.rope.dimension_count", int, head_dim) != head_dim:
        raise file.fail(f"{arch}.rope.dimension_count", f"must equal the head size {head_dim} (partial rotary)")
    raw = {
        "architectures": [ARCHITECTURES[arch]],
        "vocab_size": file.get(f"{arch}.vocab_size", int, _vocab_rows(file)),
        "hidden_size": hidden,
        "intermediate_size": file.get(f"{arch}.feed_forward_length", int),
        "num_hidden_layers": file.get(f"{arch}.block_count", int),
        "num_attention_heads": heads,
        "num_key_value_heads": file.get(f"{arch}.attention.head_count_kv", int, heads),
        "head_dim": head_dim,
        "max_position_embeddings": file.get(f"{arch}.context_length", int),
        "rope_theta": file.get(f"{arch}.rope.freq_base", float, 10000.0),
        "rms_norm_eps": file.get(f"{arch}.attention.layer_norm_rms_epsilon", float),
        "tie_word_embeddings": "output.weight" not in file.tensors,
        "attention_bias": "blk.0.attn_q.bias" in file.tensors,
        "torch_dtype": "float32",
        "bos_token_id": file.get("tokenizer.ggml.bos_token_id", int, None),
        "eos_token_id": _eos_ids(file),
    }
    return replace(parse_config(raw, {}, file.path.parent, source=file.path), quantization=file.quantization)


def _vocab_rows(file: GGUFFile) -> int:
    embed = file.tensors.get("token_embd.weight")
    if embed is None:
        raise CheckpointError(f"{file.path}: missing tensor 'token_embd.weight'")
    return int(embed.shape[-1])


def _eos_ids(file: GGUFFile) -> list[int]:
    """End of sequence and, for chat models, end of turn (llama.cpp stops at either)."""
    ids = [file.get(f"tokenizer.ggml.{k}_token_id", int, None) for k in ("eos", "eot", "eom")]
    return list(dict.fromkeys(i for i in ids if i is not None))


@dataclass(frozen=True)
class _Fill:
    source: str  # GGUF tensor name
    dest: torch.Tensor  # the parameter rows it fills
    heads: int  # > 0: undo llama.cpp's rope permutation over this many heads


def load_gguf_weights(model: CausalLM, file: GGUFFile) -> None:
    """Dequantise every tensor into its (row slice of a) parameter, after checking them all."""
    fills = _plan(model, file)
    large = file.path.stat().st_size > PROGRESS_BYTES
    for fill in tqdm(fills, desc="Dequantising GGUF", unit="tensor", disable=not large):
        tensor = file.tensors[fill.source]
        values = dequantize(tensor.data, tensor.tensor_type, tuple(fill.dest.shape))
        if fill.heads:
            values = unpermute_rope_rows(values, fill.heads)
        fill.dest.copy_(values)


def _plan(model: CausalLM, file: GGUFFile) -> list[_Fill]:
    config, targets = model.config, model.checkpoint_targets()
    permuted = file.architecture in ROPE_PERMUTED
    fills, filled = [], set()
    for name, tensor in file.tensors.items():
        target = hf_name(name)
        if target is None or target not in targets:
            raise CheckpointError(f"{file.path}: tensor '{name}' is not part of a {file.architecture} model "
                                  "this runtime supports")
        if tensor.tensor_type not in SUPPORTED:
            raise CheckpointError(f"{file.path}: tensor '{name}' has type {tensor.tensor_type.name}; supported: "
                                  f"{sorted(t.name for t in SUPPORTED)}")
        param, rows = targets[target]
        dest = param.data[rows]
        shape = tuple(int(d) for d in reversed(tensor.shape))  # GGUF lists the fastest dimension first
        if shape != tuple(dest.shape):
            raise CheckpointError(f"{file.path}: tensor '{name}' has shape {shape}, expected {tuple(dest.shape)}")
        heads = 0
        if permuted and ".attn_q." in name:
            heads = config.num_heads
        elif permuted and ".attn_k." in name:
            heads = config.num_kv_heads
        fills.append(_Fill(name, dest, heads))
        filled.add(target)
    missing = [name for name in targets if name not in filled]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{file.path}: missing tensor for '{missing[0]}'{more}")
    return fills


def unpermute_rope_rows(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Inverse of convert_hf_to_gguf.py's ``permute``: per head, rows (0, half, 1, half+1, ...) -> halves."""
    rest = w.shape[1:]
    return w.reshape(heads, -1, 2, *rest).transpose(1, 2).reshape(w.shape)
