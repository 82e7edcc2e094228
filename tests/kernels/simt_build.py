"""CUDA sources built for the host over simt_host.h, so the code a GPU runs is tested here."""
import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CSRC = HERE.parents[1] / "csrc"
CXX = shutil.which("g++")


def host_library(tmp_path_factory, harness: str) -> ctypes.CDLL:
    """`harness` (a .cpp beside this file that includes a kernel) as a loaded shared library."""
    if CXX is None:
        pytest.skip("g++ not found")
    lib = tmp_path_factory.mktemp("cuda_host") / (Path(harness).stem + ".so")
    subprocess.run([CXX, "-std=c++20", "-O1", "-shared", "-fPIC", f"-I{CSRC}", f"-I{HERE}",
                    str(HERE / harness), "-o", str(lib)], check=True, timeout=300)
    return ctypes.CDLL(str(lib))
