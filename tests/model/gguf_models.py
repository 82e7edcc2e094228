"""Tiny GGUF checkpoints written with llama.cpp's own writer (gguf.GGUFWriter), as
convert_hf_to_gguf.py would write them: llama.cpp's names, Llama's q/k rows permuted, 2-D
weights in the type under test (quantised with gguf.quants where it can, otherwise random raw
blocks), norms and biases in F32."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q

from zllm_core.tokenizer.hf_json import byte_level_alphabet

COMMON = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
# Row lengths are multiples of 256, the K-quants' block.
VARIANTS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
              dict(tie_word_embeddings=False, rope_theta=10000.0)),  # untied head, q/k permuted
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              dict(tie_word_embeddings=True, rope_theta=1e6)),  # q/k/v biases, tied head
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM,
              dict(tie_word_embeddings=False, head_dim=128, rope_theta=1e6)),  # q/k norms, head_dim apart
}
QUANTIZABLE = {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1}  # gguf.quants.quantize handles these
RAW_ONLY = {Q.Q4_K, Q.Q5_K, Q.Q6_K}
# Where each K-quant keeps its fp16 super-block scales (d, and dmin), in bytes.
_K_SCALE_BYTES = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}

_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
          "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
_GLOBAL = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def reference_model(arch: str, seed: int = 0) -> transformers.PreTrainedModel:
    config_cls, model_cls, extra = VARIANTS[arch]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**COMMON, **extra)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if name.endswith("norm.weight") else p.normal_(0.0, 0.05)
    return model


def gguf_name(hf: str) -> str:
    stem, kind = hf.rsplit(".", 1)
    if stem in _GLOBAL:
        return f"{_GLOBAL[stem]}.{kind}"
    _, _, layer, rest = stem.split(".", 3)
    return f"blk.{layer}.{_LAYER[rest]}.{kind}"


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: rotary pairs made adjacent, per head."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def raw_blocks(qtype: Q, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Random K-quant blocks with small, finite fp16 super-block scales."""
    block_size, block_bytes = GGML_QUANT_SIZES[qtype]
    n_blocks = shape[0] * shape[1] // block_size
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for at in _K_SCALE_BYTES[qtype]:
        scale = rng.uniform(1e-4, 4e-4, size=n_blocks).astype(np.float16)
        blocks[:, at:at + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(shape[0], -1)


def encode(values: np.ndarray, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    if values.ndim == 1 or qtype == Q.F32:
        return values.astype(np.float32)
    if qtype == Q.F16:
        return values.astype(np.float16)
    if qtype in RAW_ONLY:
        return raw_blocks(qtype, values.shape, rng)
    return gguf.quants.quantize(values.astype(np.float32), qtype)


def write_model_gguf(path: Path, model: transformers.PreTrainedModel, qtype: Q = Q.F32, *,
                     permute_rope: bool | None = None, drop: tuple[str, ...] = (),
                     metadata: dict | None = None, architecture: str | None = None, seed: int = 0) -> Path:
    """``model``'s weights as a GGUF; ``permute_rope`` defaults to what llama.cpp does (Llama only);
    ``metadata`` adds or (with None) removes keys, ``architecture`` overrides general.architecture."""
    cfg, arch = model.config, model.config.model_type
    permute_rope = arch == "llama" if permute_rope is None else permute_rope
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, architecture or arch)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    keys = {
        f"{arch}.context_length": cfg.max_position_embeddings, f"{arch}.embedding_length": cfg.hidden_size,
        f"{arch}.block_count": cfg.num_hidden_layers, f"{arch}.feed_forward_length": cfg.intermediate_size,
        f"{arch}.attention.head_count": cfg.num_attention_heads,
        f"{arch}.attention.head_count_kv": cfg.num_key_value_heads,
        f"{arch}.attention.key_length": head_dim, f"{arch}.attention.value_length": head_dim,
        f"{arch}.rope.dimension_count": head_dim, f"{arch}.vocab_size": cfg.vocab_size,
        "tokenizer.ggml.bos_token_id": cfg.bos_token_id, "tokenizer.ggml.eos_token_id": cfg.eos_token_id,
        **(metadata or {}),
    }
    floats = {f"{arch}.rope.freq_base": _rope_theta(cfg), f"{arch}.attention.layer_norm_rms_epsilon": cfg.rms_norm_eps}
    for key, value in keys.items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif value is not None:
            writer.add_uint32(key, value)
    for key, value in floats.items():
        writer.add_float32(key, value)
    _add_tokenizer(writer, cfg.vocab_size)
    for name, tensor in model.state_dict().items():
        target = gguf_name(name)
        if target in drop or (name == "lm_head.weight" and cfg.tie_word_embeddings):
            continue
        values = tensor.detach().float().numpy()
        if permute_rope and ".attn_q." in target:
            values = permute(values, cfg.num_attention_heads)
        elif permute_rope and ".attn_k." in target:
            values = permute(values, cfg.num_key_value_heads)
        data = encode(values, qtype, rng)
        raw = qtype if data.dtype == np.uint8 else None
        writer.add_tensor(target, data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))


def _add_tokenizer(writer: gguf.GGUFWriter, vocab_size: int) -> None:
    """A byte-level vocabulary of the model's size (transformers reads its length as vocab_size)."""
    chars = list(byte_level_alphabet())
    texts = chars + [f"{chars[i % 26 + 65]}{chars[i // 26 % 26 + 65]}" for i in range(vocab_size - 256)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(texts)
    writer.add_token_types([1] * vocab_size)
    writer.add_token_merges([f"{texts[65]} {texts[66]}"])
