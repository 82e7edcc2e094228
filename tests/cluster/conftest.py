"""`zllm serve --replicas 2` on loopback, started as a user starts it (a local Ray cluster that
the server starts and stops), with clients and a view of its replicas."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

pytest.importorskip("ray.serve", reason="the cluster needs Ray Serve: pip install 'zllm_core[cluster]'")

REPO = Path(__file__).resolve().parents[2]
MODEL = "zllm-demo"
API_KEY = "cluster-key"
KV_BYTES = str(16 << 20)  # 256 blocks of the demo model per replica
AUTH = {"authorization": f"Bearer {API_KEY}"}
ROUTING_PERIOD = 0.25  # seconds between the replicas' published summaries and counters


@dataclass
class LiveCluster:
    url: str
    process: subprocess.Popen
    log: Path
    ssd: Path

    def replicas(self) -> dict[str, dict]:
        return httpx.get(self.url + "/cluster", headers=AUTH, timeout=10).json()["replicas"]

    def requests(self) -> dict[str, int]:
        """Each replica's engine request count, once what finished before has been published."""
        time.sleep(3 * ROUTING_PERIOD)
        return {rid: r["requests"] for rid, r in self.replicas().items()}

    def wait_for(self, check, what: str, timeout: float = 90.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check(self.replicas())
            if found:
                return found
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}: {self.replicas()}")

    def served_by(self, before: dict[str, int], n: int) -> str:
        """The one replica whose request count grew by `n` since `before` (the others' did not),
        once the replicas' published counters show it."""
        def grown(replicas):
            delta = {rid: r["requests"] - before.get(rid, 0) for rid, r in replicas.items()}
            hit = [rid for rid, d in delta.items() if d == n]
            return hit[0] if len(hit) == 1 and sum(delta.values()) == n else None
        return self.wait_for(grown, f"{n} requests on one replica")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_cluster(tmp: Path, *extra: str) -> LiveCluster:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "-m", "zllm_core.cli", "serve", "--model", MODEL, "--replicas", "2", "--port", "0",
           "--api-key", API_KEY, "--max-model-len", "4096", "--max-output-tokens", "256",
           "--kv-cache-bytes", KV_BYTES, "--ssd-cache-dir", str(tmp / "ssd"),
           "--response-store", str(tmp / "responses.sqlite3"), "--routing-period", str(ROUTING_PERIOD),
           "--log-level", "warning", *extra]
    log = tmp / "cluster.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, stderr=sink, stdout=sink, text=True, cwd=REPO)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        match = re.search(r"zllm serving .* on (http://\S+)", log.read_text())
        if match:
            live = LiveCluster(match.group(1), proc, log, tmp / "ssd")
            # The router lives in the ingress's handle, made by the first request it routes.
            openai.OpenAI(base_url=live.url + "/v1", api_key=API_KEY).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "warm up"}], max_tokens=1)
            live.wait_for(lambda r: len(r) == 2 and all(v.get("pid") for v in r.values()), "two replicas reporting")
            return live
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("zllm serve --replicas did not start:\n" + log.read_text()[-5000:])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> LiveCluster:
    # --route-balance-abs 2: a replica two requests busier than the other yields new work.
    live = start_cluster(tmp_path_factory.mktemp("cluster"), "--route-balance-abs", "2")
    try:
        yield live
    finally:
        live.stop()
