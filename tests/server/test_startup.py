"""Starting the server as a user does: a busy port or an unusable device is one clear line,
before the model loads; setup says what it is doing."""
import socket
import subprocess
import sys
import time

import pytest
import torch

from zllm_core.engine.device import resolve_device

from .conftest import REPO


def zllm(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zllm_core.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def test_busy_port_is_refused_in_one_line_before_the_model_loads(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        start = time.monotonic()
        r = zllm("serve", "--port", str(port), "--response-store", str(tmp_path / "s.sqlite3"))
        elapsed = time.monotonic() - start
    assert r.returncode == 2
    assert r.stderr.strip() == (f"zllm: error: port {port} on 127.0.0.1 is already in use; pick another "
                                "with --port (make serve PORT=...), or 0 for any free port")
    assert elapsed < 20  # interpreter start and imports only: no model was built


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU-only torch")
@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["generate", "hi"]])
def test_cuda_on_a_cpu_torch_is_one_clear_line(command):
    r = zllm(*command, "--device", "cuda")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--device cuda" in r.stderr and "CPU-only build" in r.stderr and "--device cpu" in r.stderr


def test_auto_picks_cuda_exactly_when_torch_sees_one():
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="not a torch device"):
        resolve_device("gpu0")
    with pytest.raises(ValueError, match="only cpu and cuda"):
        resolve_device("meta")


def test_the_startup_line_names_the_device(server):
    line = next(line for line in server.log.read_text().splitlines() if "zllm serving" in line)
    expected = "(device cuda:" if torch.cuda.is_available() else "(device cpu ("
    assert expected in line


def test_setup_announces_each_step_and_shows_the_build():
    r = subprocess.run(["make", "--dry-run", "--always-make", "setup", "VENV=/nonexistent/venv"],
                       capture_output=True, text=True, cwd=REPO, timeout=30)
    assert r.returncode == 0, r.stderr
    steps = [line for line in r.stdout.splitlines() if line.startswith("echo \"==> [")]
    assert len(steps) == 3
    install = next(line for line in r.stdout.splitlines() if "pip install -v -e" in line)
    assert " -q" not in install  # pip's own progress stays visible


def test_an_unknown_tool_dialect_is_one_clear_line():
    r = zllm("serve", "--tool-dialect", "xml")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "unknown tool dialect 'xml'" in r.stderr and "dsml" in r.stderr


@pytest.mark.parametrize("flag, value, says", [("--max-prefill-tokens-while-decoding", "0", "'0' must be positive"),
                                               ("--max-num-seqs", "x", "'x' is not an integer")])
def test_an_engine_size_that_is_no_positive_integer_is_one_clear_line(flag, value, says):
    r = zllm("serve", flag, value)
    assert r.returncode == 2 and "Traceback" not in r.stderr and says in r.stderr
