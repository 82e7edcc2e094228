"""GGML block formats -> float32, in torch, one whole tensor at a time.

Each format stores a tensor's rows as consecutive blocks of `BLOCK_SIZES[type]` values in
`BLOCK_BYTES[type]` bytes.  The layouts follow ggml-quants.c (and llama.cpp's reference
`gguf.quants.dequantize`, which the tests compare against); each function takes the raw
bytes as a ``[n_blocks, block_bytes]`` uint8 tensor and returns ``[n_blocks, block_size]``
float32, with only tensor-wide operations, so a 50 M-value embedding costs a few vector passes.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q

QK_K = 256  # values per K-quant super-block


def _f16(raw: torch.Tensor) -> torch.Tensor:
    """``[n, 2]`` little-endian fp16 bytes -> ``[n, 1]`` float32."""
    return raw.contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """``[n, k]`` bytes -> ``[n, 2k]``: every byte's low nibbles, then its high nibbles."""
    return torch.cat((qs & 0x0F, qs >> 4), dim=-1)


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    return _f16(b[:, :2]) * b[:, 2:].contiguous().view(torch.int8).float()


def _q4_0(b: torch.Tensor) -> torch.Tensor:
    return _f16(b[:, :2]) * (_nibbles(b[:, 2:]).float() - 8)


def _q4_1(b: torch.Tensor) -> torch.Tensor:
    return _f16(b[:, :2]) * _nibbles(b[:, 4:]).float() + _f16(b[:, 2:4])


def _k_scales(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K: 12 bytes -> eight 6-bit scales and eight 6-bit mins, as floats ``[n, 8]``."""
    d, m, md = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = torch.cat((d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)), dim=-1)
    mn = torch.cat((m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)), dim=-1)
    return sc.float(), mn.float()


def _k_affine(b: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``d * scale * q - dmin * min`` over eight sub-blocks of 32 (the Q4_K/Q5_K tail)."""
    sc, mn = _k_scales(b[:, 4:16])
    n = b.shape[0]
    d, dmin = _f16(b[:, 0:2]) * sc, _f16(b[:, 2:4]) * mn
    return (d[:, :, None] * q.view(n, 8, 32).float() - dmin[:, :, None]).view(n, QK_K)


def _k_low_nibbles(qs: torch.Tensor) -> torch.Tensor:
    """K-quant 4-bit packing: each 32-byte chunk holds 32 values in its low nibbles, then 32 in its high."""
    n = qs.shape[0]
    chunks = qs.view(n, -1, 1, 32)
    return torch.cat((chunks & 0x0F, chunks >> 4), dim=2).view(n, -1)


def _q4_k(b: torch.Tensor) -> torch.Tensor:
    return _k_affine(b, _k_low_nibbles(b[:, 16:]))


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    qh = b[:, 16:48]  # bit j of byte i: the fifth bit of value 32 * j + i
    shifts = torch.arange(8, dtype=torch.uint8, device=b.device).view(1, 8, 1)
    high = ((qh.view(n, 1, 32) >> shifts) & 1).view(n, QK_K)
    return _k_affine(b, _k_low_nibbles(b[:, 48:]) | (high << 4))


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    ql, qh = b[:, :128].reshape(n, 2, 1, 64), b[:, 128:192].reshape(n, 2, 1, 32)
    low = torch.cat((ql & 0x0F, ql >> 4), dim=2).view(n, 2, 4, 32)
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=b.device).view(1, 1, 4, 1)
    high = (qh >> shifts) & 3
    q = (low | (high << 4)).view(n, 16, 16).float() - 32
    scales = b[:, 192:208].contiguous().view(torch.int8).float()
    return (_f16(b[:, 208:210]) * scales)[:, :, None].mul(q).view(n, QK_K)


BLOCK_FORMATS: dict[Q, Callable[[torch.Tensor], torch.Tensor]] = {
    Q.Q8_0: _q8_0, Q.Q4_0: _q4_0, Q.Q4_1: _q4_1, Q.Q4_K: _q4_k, Q.Q5_K: _q5_k, Q.Q6_K: _q6_k,
}
PLAIN = {Q.F32: torch.float32, Q.F16: torch.float16, Q.BF16: torch.bfloat16}
SUPPORTED = frozenset(BLOCK_FORMATS) | frozenset(PLAIN)


def tensor_bytes(qtype: Q, n_values: int) -> int:
    """How many bytes ``n_values`` of ``qtype`` take (n_values a multiple of its block size)."""
    block_size, block_bytes = GGML_QUANT_SIZES[qtype]
    return n_values // block_size * block_bytes


def dequantize(raw: np.ndarray, qtype: Q, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor's raw bytes (any numpy view of them) -> float32 of ``shape``.  The caller has
    checked that ``qtype`` is in SUPPORTED and that ``raw`` holds ``tensor_bytes`` bytes."""
    data = torch.from_numpy(np.array(raw).reshape(-1).view(np.uint8))  # a copy: the file's map is read-only
    if qtype in PLAIN:
        return data.view(PLAIN[qtype]).float().view(shape)
    _, block_bytes = GGML_QUANT_SIZES[qtype]
    return BLOCK_FORMATS[qtype](data.view(-1, block_bytes)).view(shape)
