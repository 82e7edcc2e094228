"""A PostgreSQL server for tests: the machine's own installation (Debian's `postgresql`, which
`make test` installs where it is missing), a new cluster in a temporary directory, reachable
only by its unix socket, stopped at the end. Run as the `postgres` user when the tests run as
root (the server refuses root)."""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg


def server_binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    initdb = found[-1] if found else shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresServer:
    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="zllm-pg-"))
        self.data, self.socket = self.root / "data", self.root / "socket"
        self.socket.mkdir()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "postgres", "--"]
            for path in (self.root, self.socket):
                shutil.chown(path, "postgres", "postgres")
        subprocess.run([*self.as_user, str(bindir / "initdb"), "-D", str(self.data), "-U", "zllm", "-A", "trust",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
        self.proc: subprocess.Popen | None = None
        self.start()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://zllm@/{database}?host={self.socket}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [*self.as_user, str(self.bindir / "postgres"), "-D", str(self.data), "-k", str(self.socket),
             "-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        """A fast shutdown: clients are disconnected, as when a database server restarts."""
        if self.proc is not None and self.proc.poll() is None:
            # The postmaster itself (runuser, when there, is its parent and passes on little).
            postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(postmaster, signal.SIGINT)
            self.proc.wait(timeout=30)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
