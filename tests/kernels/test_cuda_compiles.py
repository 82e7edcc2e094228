"""The CUDA sources compile for sm_90 wherever nvcc exists, so they cannot rot on CPU hosts."""
import shutil
import subprocess
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "csrc"
NVCC = shutil.which("nvcc")


def compile_for(arch: str, source: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [NVCC, f"-arch={arch}", "-std=c++17", "-O3", "-c", str(source), "-o", str(tmp_path / "k.o")],
        capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
@pytest.mark.parametrize("source", sorted(CSRC.glob("*.cu")), ids=lambda p: p.name)
def test_cuda_source_compiles_for_sm90(source, tmp_path):
    result = compile_for("sm_90", source, tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
def test_token_bitmask_compiles_for_sm80(tmp_path):
    """The mask apply needs nothing past Ampere, so A100s can serve fenced requests too."""
    result = compile_for("sm_80", CSRC / "token_bitmask.cu", tmp_path)
    assert result.returncode == 0, result.stderr
