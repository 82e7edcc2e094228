"""Suite-wide setup: shared data location and the Triton interpreter on CPU-only hosts."""
import os
from pathlib import Path

import pytest
import torch

# Triton reads this at import time, so it must be set before any test imports a kernel.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ZLLM_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"shared data not found at {SHARED} (set ZLLM_SHARED_DIR)")
    return SHARED
