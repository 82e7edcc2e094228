"""The GPU tokenizer's CUDA source compiles for Ampere as well (it needs warp reductions, sm_80,
and nothing later); test_cuda_compiles.py compiles every .cu for sm_90."""
import pytest

from test_cuda_compiles import CSRC, NVCC, compile_for


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
def test_gpu_tokenizer_compiles_for_sm80(tmp_path):
    result = compile_for("sm_80", CSRC / "gpu_tokenize.cu", tmp_path)
    assert result.returncode == 0, result.stderr
