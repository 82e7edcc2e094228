"""Suite-wide setup: the generated agent trace and the Triton interpreter on CPU-only hosts."""
import os
import sys
from pathlib import Path

import pytest
import torch

# Triton reads this at import time, so it must be set before any test imports a kernel.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from trace_replay import agent_trace as _agent_trace  # noqa: E402


@pytest.fixture(scope="session")
def agent_trace() -> Path:
    """Sixteen agent sessions (~6,000 calls) generated on this machine, cached across runs."""
    return _agent_trace()


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server of this machine's installation, for the response store's tests."""
    from postgres_server import PostgresServer, server_binaries

    bindir = server_binaries()
    if bindir is None:
        pytest.skip("no PostgreSQL server installed (make test installs Debian's postgresql)")
    server = PostgresServer(bindir)
    yield server
    server.close()
