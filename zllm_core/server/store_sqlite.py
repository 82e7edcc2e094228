"""The response store's SQLite file: one host's store, shared by the processes that open it.

A write waits up to `busy_seconds` for another process's lock (a lock that outlasts it is a
retryable failure); a file that is not a database at all is moved aside at open (kept, for
whoever wants to recover it) and a new store begins; files written before chains gain the
chain columns in place.
"""
from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger("zllm.server")

# Added to files written before chains: NULL parent = messages hold the whole conversation.
COLUMNS = {"parent": "TEXT", "hidden": "INTEGER NOT NULL DEFAULT 0"}


class SqliteDatabase:
    errors = (sqlite3.Error,)
    share_lock = update_lock = ""  # BEGIN IMMEDIATE serialises writers: rows need no locks

    def __init__(self, path: str, busy_seconds: float, schema: tuple[str, ...]):
        self.where, self.busy_seconds, self.schema = path, busy_seconds, schema
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._open_when_free()
        except sqlite3.DatabaseError as exc:
            if path == ":memory:" or _locked(exc):
                raise
            self._move_aside(exc)
            self._db = self._open_when_free()

    def _open_when_free(self) -> sqlite3.Connection:
        """`_open`, again while another process holds the file's lock, up to `busy_seconds`:
        switching a new file to WAL takes its lock without waiting in SQLite's busy handler, so
        two processes opening one new store at once could fail without this."""
        deadline = time.monotonic() + self.busy_seconds
        while True:
            try:
                return self._open()
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.where, check_same_thread=False, isolation_level=None, timeout=self.busy_seconds)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(self.schema[0])
            have = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
            for name, kind in COLUMNS.items():
                if name not in have:
                    db.execute(f"ALTER TABLE responses ADD COLUMN {name} {kind}")
            for statement in self.schema[1:]:
                db.execute(statement)
            db.execute("SELECT 1 FROM responses LIMIT 1").fetchall()
        except BaseException:
            db.close()
            raise
        return db

    def _move_aside(self, exc: sqlite3.DatabaseError) -> None:
        aside = f"{self.where}.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
        for suffix in ("", "-wal", "-shm"):
            if Path(self.where + suffix).exists():
                Path(self.where + suffix).rename(aside + suffix)
        log.warning("the response store %s cannot be read (%s): moved to %s, a new store begins",
                    self.where, exc, aside)

    def execute(self, sql: str, params: dict[str, Any]) -> list[tuple]:
        return self._db.execute(sql, params).fetchall()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def retryable(self, exc: Exception) -> bool:
        return _locked(exc)

    def close(self) -> None:
        self._db.close()


def _locked(exc: BaseException) -> bool:
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
