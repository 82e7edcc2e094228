"""The SSD tier's directory fills up while snapshots are written: a real `zllm serve` on a real,
small filesystem (an 8 MiB tmpfs, mounted for the test; it needs root, which CI has).

Writes that do not fit fail and take their partial file with them, the tier's budget drops to
what the disk holds so newer snapshots replace older ones, every request is answered, what is
restored equals a full prefill, and a restart on the full disk serves on."""
import contextlib
import subprocess

import httpx
import pytest

from .conftest import start_server
from .test_live_ssd import conversation, first_token, same_logprobs, ssd_metrics

DISK = "8M"
KV_BYTES = str(4 << 20)  # 64 blocks of the demo model: each new conversation evicts the one before


@contextlib.contextmanager
def small_disk(path, size):
    path.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                           capture_output=True, text=True)
    if mount.returncode:
        pytest.skip(f"a small filesystem needs `mount -t tmpfs` (root): {mount.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def small(i):
    return conversation(f"disk-{i}", rules=40)  # about 650 tokens: a 2.6 MB snapshot


def test_a_full_ssd_directory_costs_backups_never_answers(tmp_path):
    with small_disk(tmp_path / "ssd", DISK) as ssd:
        args = ("--kv-cache-bytes", KV_BYTES, "--ssd-cache-dir", str(ssd), "--ssd-cache-bytes", "1G")
        server = start_server(tmp_path / "responses.sqlite3", *args)
        try:
            reference = {i: first_token(server, small(i)) for i in range(6)}  # cold: full prefills
            assert all(cached == 0 for _, cached in reference.values())
            top, cached = first_token(server, small(4))  # evicted by 5, written after the disk filled
            assert cached > 0 and same_logprobs(top, reference[4][0])
            metrics = ssd_metrics(server)
            assert metrics["write_errors"] >= 1 and metrics["failed_restores"] == metrics["quarantined"] == 0
            assert not list((ssd / "blobs").glob("*.tmp"))  # a failed write left nothing behind
        finally:
            server.stop()
        assert server.process.returncode == -15
        log = server.log.read_text()
        assert "is full" in log and "Traceback" not in log, log[-3000:]

        restarted = start_server(tmp_path / "responses.sqlite3", *args)
        try:  # the last conversation was backed up at shutdown, on the full disk
            top, cached = first_token(restarted, small(5))
            assert cached > 0 and same_logprobs(top, reference[5][0])
            metrics = ssd_metrics(restarted)
            assert metrics["hits"] == 1 and metrics["failed_restores"] == metrics["quarantined"] == 0
            assert httpx.get(restarted.url + "/health", timeout=10).json()["status"] == "ok"
        finally:
            restarted.stop()
        assert "Traceback" not in restarted.log.read_text()
