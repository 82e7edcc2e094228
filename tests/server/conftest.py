"""A live `zllm serve` on loopback, started the way a user starts it, and SDK clients for it."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = "zllm-demo"
API_KEY = "test-key"
MAX_MODEL_LEN = 16384
MAX_BODY_BYTES = 4 << 20


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen
    store: Path
    log: Path  # the server's stderr: a file, so a chatty server can never block on a full pipe

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(store: Path, *extra: str, model: str | None = MODEL,
                 max_model_len: int = MAX_MODEL_LEN, response_store: str | None = None) -> LiveServer:
    """``model=None`` serves the default model, as a bare ``zllm serve`` does. The response store
    is the SQLite file `store` (beside which the server's log goes), or `response_store`."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "zllm_core.cli", "serve", *(["--model", model] if model else []), "--port", "0",
           "--api-key", API_KEY, "--max-model-len", str(max_model_len),
           "--max-output-tokens", "64", "--max-body-bytes", str(MAX_BODY_BYTES),
           "--response-store", response_store or str(store), *extra]
    log = store.with_name(store.name + f".{time.monotonic_ns()}.log")
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, stderr=sink, text=True, cwd=REPO)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        match = re.search(r"on (http://\S+)", log.read_text())
        if match:
            server = LiveServer(match.group(1), proc, store, log)
            _wait_healthy(server.url)
            return server
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("zllm serve did not start:\n" + log.read_text())


def _wait_healthy(url: str) -> None:
    for _ in range(100):
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("zllm serve never became healthy")


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> LiveServer:
    # Speculating, as a server for agents would: every live test then runs drafted steps.
    live = start_server(tmp_path_factory.mktemp("store") / "responses.sqlite3", "--speculative-tokens", "4")
    yield live
    live.stop()


@pytest.fixture(scope="session")
def openai_client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="session")
def anthropic_client(server):
    import anthropic
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
