"""The CUDA sources compile for sm_90 wherever nvcc exists, so they cannot rot on CPU hosts."""
import shutil
import subprocess
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "csrc"
NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
@pytest.mark.parametrize("source", sorted(CSRC.glob("*.cu")), ids=lambda p: p.name)
def test_cuda_source_compiles_for_sm90(source, tmp_path):
    result = subprocess.run(
        [NVCC, "-arch=sm_90", "-std=c++17", "-O3", "-c", str(source), "-o", str(tmp_path / "k.o")],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
