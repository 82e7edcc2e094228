"""Stored responses: what previous_response_id needs to rebuild a conversation after a restart.

A record holds the response object (for GET /v1/responses/{id}), its cache key, and the
canonical conversation up to and including that response's output: stored as the messages it
adds to its parent's (previous_response_id) when the parent is stored, so a turn writes and a
continuation reads its own messages, not the whole history. A chain is read back in one
recursive query after a restart, and recent records are kept in memory (the same Message
objects, which the renderer then compares by identity). It owns no model state: rebuilding the
conversation only recreates the prompt; whether the prefix is still cached is the engine's
business. Records are scoped by tenant, written in one transaction, and treated as untrusted on
read (a record, or any ancestor of it, that does not validate is reported missing, never
half-used). A deleted record whose descendants still need its messages is hidden, not removed.

The file is shared with whatever else opens it. A write waits up to `busy_seconds` for another
process's lock (callers run it off the event loop); past that, or on a damaged file, the
operation fails with a clear protocol error (503 when a retry may work, 500 when not) and the
caller reports the response as not stored. A file that is not a database at all is moved aside
at start (kept, for whoever wants to recover it) and a new store begins.
"""
from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from zllm_core.protocols.canonical import Message, RequestError, ToolCall

log = logging.getLogger("zllm.server")
BUSY_SECONDS = 10.0  # by default, another process's write lock is waited for this long
ROLES = ("system", "developer", "user", "assistant", "tool")

SCHEMA = """CREATE TABLE IF NOT EXISTS responses (
    tenant TEXT NOT NULL, id TEXT NOT NULL, created_at REAL NOT NULL,
    response TEXT NOT NULL, messages TEXT NOT NULL, cache_key TEXT,
    PRIMARY KEY (tenant, id))"""
# Added to files written before chains: NULL parent = messages hold the whole conversation.
COLUMNS = {"parent": "TEXT", "hidden": "INTEGER NOT NULL DEFAULT 0"}
RECENT = 256  # records kept in memory
# A chain from a record back to the one holding its conversation's start, oldest first.
CHAIN = """WITH RECURSIVE chain(id, parent, messages, depth) AS (
    SELECT id, parent, messages, 0 FROM responses WHERE tenant = :tenant AND id = :id
    UNION ALL
    SELECT r.id, r.parent, r.messages, c.depth + 1 FROM responses r JOIN chain c
        ON r.tenant = :tenant AND r.id = c.parent WHERE c.depth < :limit)
SELECT parent, messages FROM chain ORDER BY depth DESC"""
MAX_CHAIN = 1 << 20


@dataclass
class StoredResponse:
    id: str
    response: dict[str, Any]
    messages: list[Message]
    cache_key: str | None = None
    # The record this one continues and how many leading messages are that record's: the
    # store then writes only the rest (it must hold the parent, else it writes them all).
    parent: str | None = None
    shared: int = 0


def _message_from(raw: Any) -> Message:
    if not isinstance(raw, dict) or raw.get("role") not in ROLES:
        raise ValueError("message without a valid role")
    calls = raw.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ValueError("tool_calls is not a list")
    tool_calls = tuple(ToolCall(id=str(c["id"]), name=str(c["name"]),
                                arguments=str(c["arguments"])) for c in calls)
    content = raw.get("content") or ""
    if not isinstance(content, str):
        raise ValueError("content is not text")
    return Message(role=raw["role"], content=content, reasoning=raw.get("reasoning"),
                   tool_calls=tool_calls, tool_call_id=raw.get("tool_call_id"),
                   name=raw.get("name"))


class ResponseStore:
    def __init__(self, path: str | Path, busy_seconds: float = BUSY_SECONDS):
        self.path, self.busy_seconds = str(path), busy_seconds
        if self.path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._recent: OrderedDict[tuple[str, str], StoredResponse] = OrderedDict()
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            if self.path == ":memory:" or _locked(exc):
                raise
            self._move_aside(exc)
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=self.busy_seconds)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(SCHEMA)
            have = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
            for name, kind in COLUMNS.items():
                if name not in have:
                    db.execute(f"ALTER TABLE responses ADD COLUMN {name} {kind}")
            db.execute("CREATE INDEX IF NOT EXISTS responses_parent ON responses(tenant, parent)")
            db.execute("SELECT 1 FROM responses LIMIT 1").fetchall()
        except BaseException:
            db.close()
            raise
        return db

    def _move_aside(self, exc: sqlite3.DatabaseError) -> None:
        aside = f"{self.path}.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
        for suffix in ("", "-wal", "-shm"):
            if Path(self.path + suffix).exists():
                Path(self.path + suffix).rename(aside + suffix)
        log.warning("the response store %s cannot be read (%s): moved to %s, a new store begins",
                    self.path, exc, aside)

    def put(self, tenant: str, record: StoredResponse) -> None:
        """Blocks up to `busy_seconds` while another process holds the file's write lock."""
        with self._lock, self._failures(f"could not save response '{record.id}'; it was not stored"), \
                self._transaction():
            chained = record.parent is not None and self._row(tenant, record.parent) is not None
            messages = record.messages[record.shared:] if chained else record.messages
            self._db.execute(
                "INSERT OR REPLACE INTO responses(tenant, id, created_at, response, messages, cache_key, parent) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (tenant, record.id, time.time(), json.dumps(record.response),
                 json.dumps([asdict(m) for m in messages]), record.cache_key, record.parent if chained else None))
            self._keep(tenant, record)

    def get(self, tenant: str, id: str) -> StoredResponse | None:
        with self._lock, self._failures(f"could not read response '{id}'"):
            row = self._row(tenant, id)
            if row is None:
                self._recent.pop((tenant, id), None)  # deleted, here or by another process
                return None
            if (tenant, id) in self._recent:
                self._recent.move_to_end((tenant, id))
                return self._recent[(tenant, id)]
            chain = self._db.execute(CHAIN, {"tenant": tenant, "id": id, "limit": MAX_CHAIN}).fetchall()
        try:
            if chain[0][0] is not None:
                raise ValueError(f"an ancestor, {chain[0][0]}, is missing")
            messages = [_message_from(m) for _, part in chain for m in json.loads(part)]
            response = json.loads(row[0])
            if not isinstance(response, dict) or response.get("id") != id:
                raise ValueError("response object does not match its id")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("stored response %s is unreadable (%s); treating it as missing", id, exc)
            return None
        record = StoredResponse(id=id, response=response, messages=messages, cache_key=row[1])
        with self._lock:
            self._keep(tenant, record)
        return record

    def delete(self, tenant: str, id: str) -> bool:
        """Blocks up to `busy_seconds` while another process holds the file's write lock. A
        record that later ones continue stays, hidden, for their messages."""
        with self._lock, self._failures(f"could not delete response '{id}'"), self._transaction():
            self._recent.pop((tenant, id), None)
            if self._row(tenant, id) is None:
                return False
            if self._db.execute("SELECT 1 FROM responses WHERE tenant=? AND parent=? LIMIT 1", (tenant, id)).fetchone():
                self._db.execute("UPDATE responses SET hidden=1 WHERE tenant=? AND id=?", (tenant, id))
            else:
                self._db.execute("DELETE FROM responses WHERE tenant=? AND id=?", (tenant, id))
            return True

    def _row(self, tenant: str, id: str) -> tuple[str, str | None] | None:
        """(response, cache_key) of a visible record (under the lock)."""
        return self._db.execute("SELECT response, cache_key FROM responses WHERE tenant=? AND id=? AND NOT hidden",
                                (tenant, id)).fetchone()

    def _keep(self, tenant: str, record: StoredResponse) -> None:
        self._recent[(tenant, record.id)] = record
        while len(self._recent) > RECENT:
            self._recent.popitem(last=False)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @contextlib.contextmanager
    def _failures(self, what: str) -> Iterator[None]:
        """SQLite's failures as the protocol's: a lock may pass (503), damage will not (500)."""
        try:
            yield
        except sqlite3.Error as exc:
            locked = _locked(exc)
            log.warning("response store %s: %s (%s)", self.path, what, exc)
            raise RequestError(f"the response store {what}: {exc}", status=503 if locked else 500,
                               code="response_store_busy" if locked else "response_store_damaged") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _locked(exc: sqlite3.Error) -> bool:
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
