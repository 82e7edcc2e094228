"""previous_response_id across ingress processes: two processes write one response store at the
same time (a SQLite file on a path they share, or one PostgreSQL database, which ingresses on
several hosts can share), and each reads back every response the other stored."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zllm_core.server.response_store import ResponseStore

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_processes_write_one_response_store_at_once(tmp_path, kind, request):
    n = 300
    path = tmp_path / "responses.sqlite3" if kind == "sqlite" else request.getfixturevalue("postgres").new_database()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, str(REPO / "tests/cluster/store_writer.py"), str(path), me, str(n), other],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for me, other in (("a", "b"), ("b", "a"))]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0] and all("missing 0" in out for out in outs), outs
    store = ResponseStore(path)
    record = store.get("tenant", f"resp_b_{n - 1}")
    assert record.messages[0].content == f"b asks {n - 1}" and record.cache_key == "b-conv"
    assert store.get("other-tenant", "resp_a_0") is None
