"""Every supported GGML block format dequantises exactly as llama.cpp's reference
(gguf.quants.dequantize), on quantised random data and on random raw blocks."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize as reference_dequantize

from tests.model.gguf_models import RAW_ONLY, encode
from zllm_core.model.gguf_quants import SUPPORTED, dequantize

SHAPE = (8, 512)


@pytest.mark.parametrize("qtype", sorted(SUPPORTED, key=lambda t: t.name), ids=lambda t: t.name)
def test_dequantisation_equals_the_reference(qtype):
    rng = np.random.default_rng(qtype.value)
    data = encode(rng.normal(0, 1, SHAPE).astype(np.float32), qtype, rng)
    ours = dequantize(data, qtype, SHAPE)
    expected = data.astype(np.float32) if data.dtype != np.uint8 else reference_dequantize(data, qtype)
    assert ours.dtype == torch.float32 and tuple(ours.shape) == SHAPE
    assert torch.equal(ours, torch.from_numpy(np.asarray(expected, dtype=np.float32)))


def test_raw_k_blocks_use_every_bit():
    """Random blocks set every scale, min and high bit, so a misplaced field changes values."""
    rng = np.random.default_rng(0)
    for qtype in RAW_ONLY:
        data = encode(np.zeros(SHAPE, np.float32), qtype, rng)
        assert torch.unique(dequantize(data, qtype, SHAPE)).numel() > 1000
