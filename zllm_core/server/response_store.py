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

Two databases hold it: a SQLite file (store_sqlite.py), which processes on one host share, and
PostgreSQL (store_postgres.py, a `postgresql://` location) for ingresses on many hosts; both
run the same statements. A write waits up to `busy_seconds` for another writer (callers run it
off the event loop); past that, or on damage, the operation fails with a clear protocol error
(503 when a retry may work, 500 when not) and the caller reports the response as not stored.
"""
from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol

from zllm_core.conversation_clock import Held, json_bytes
from zllm_core.protocols.canonical import Message, RequestError, ToolCall

log = logging.getLogger("zllm.server")
BUSY_SECONDS = 10.0  # by default, another process's write lock is waited for this long
ROLES = ("system", "developer", "user", "assistant", "tool")

# A NULL parent: the record's messages hold the whole conversation. Statements name their
# parameters :name (both databases take them so).
SCHEMA = ("""CREATE TABLE IF NOT EXISTS responses (
    tenant TEXT NOT NULL, id TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
    response TEXT NOT NULL, messages TEXT NOT NULL, cache_key TEXT,
    parent TEXT, hidden INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id))""",
          "CREATE INDEX IF NOT EXISTS responses_parent ON responses(tenant, parent)")
UPSERT = """INSERT INTO responses(tenant, id, created_at, response, messages, cache_key, parent, hidden)
VALUES (:tenant, :id, :created_at, :response, :messages, :cache_key, :parent, 0)
ON CONFLICT (tenant, id) DO UPDATE SET created_at = excluded.created_at, response = excluded.response,
    messages = excluded.messages, cache_key = excluded.cache_key, parent = excluded.parent, hidden = 0"""
ROW = "SELECT response, cache_key FROM responses WHERE tenant = :tenant AND id = :id AND hidden = 0"
# Records kept in memory, least recently used dropped past it: a hard safety cap, since `get`
# keeps one before any conversation is known (GET /v1/responses/{id}); those a turn uses are
# filed with its conversation (`held`) and released with it by the conversation clock.
RECENT = 256
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


def _message_bytes(m: Message) -> int:
    return (sys.getsizeof(m.content) + sys.getsizeof(m.reasoning) + 8 * len(m.tool_calls) + 128
            + sum(sys.getsizeof(c.arguments) + sys.getsizeof(c.name) + sys.getsizeof(c.id) for c in m.tool_calls))


class Database(Protocol):
    """What the store needs of a database (store_sqlite.py, store_postgres.py)."""

    where: str  # for messages: a path, or a URL without its password
    errors: tuple[type[Exception], ...]
    share_lock: str  # appended to a SELECT of a row a write depends on
    update_lock: str  # ... of a row a write changes

    def execute(self, sql: str, params: dict[str, Any]) -> list[tuple]: ...
    def transaction(self) -> contextlib.AbstractContextManager[None]: ...
    def retryable(self, exc: Exception) -> bool: ...
    def close(self) -> None: ...


def open_database(location: str | Path, busy_seconds: float) -> Database:
    """A `postgresql://` (or `postgres://`) URL, else a SQLite file (or ":memory:")."""
    if str(location).startswith(("postgresql://", "postgres://")):
        from zllm_core.server.store_postgres import PostgresDatabase  # psycopg: the postgres extra
        return PostgresDatabase(str(location), busy_seconds, SCHEMA)
    from zllm_core.server.store_sqlite import SqliteDatabase
    return SqliteDatabase(str(location), busy_seconds, SCHEMA)


class ResponseStore:
    def __init__(self, location: str | Path, busy_seconds: float = BUSY_SECONDS):
        self._db = open_database(location, busy_seconds)
        self._lock = threading.Lock()
        self._recent: OrderedDict[tuple[str, str], StoredResponse] = OrderedDict()

    def put(self, tenant: str, record: StoredResponse) -> None:
        """Blocks up to `busy_seconds` while another writer holds what this write needs."""
        with self._lock, self._failures(f"could not save response '{record.id}'; it was not stored"), \
                self._db.transaction():
            chained = record.parent is not None and self._row(tenant, record.parent, self._db.share_lock) is not None
            messages = record.messages[record.shared:] if chained else record.messages
            self._db.execute(UPSERT, {
                "tenant": tenant, "id": record.id, "created_at": time.time(), "response": json.dumps(record.response),
                "messages": json.dumps([asdict(m) for m in messages]), "cache_key": record.cache_key,
                "parent": record.parent if chained else None})
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
            chain = self._db.execute(CHAIN, {"tenant": tenant, "id": id, "limit": MAX_CHAIN})
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
        """Blocks up to `busy_seconds` while another writer holds the record. A record that
        later ones continue stays, hidden, for their messages."""
        with self._lock, self._failures(f"could not delete response '{id}'"), self._db.transaction():
            self._recent.pop((tenant, id), None)
            if self._row(tenant, id, self._db.update_lock) is None:
                return False
            key = {"tenant": tenant, "id": id}
            if self._db.execute("SELECT 1 FROM responses WHERE tenant = :tenant AND parent = :id LIMIT 1", key):
                self._db.execute("UPDATE responses SET hidden = 1 WHERE tenant = :tenant AND id = :id", key)
            else:
                self._db.execute("DELETE FROM responses WHERE tenant = :tenant AND id = :id", key)
            return True

    def held(self, tenant: str, record: StoredResponse) -> Held | None:
        """The record's place in memory, if it has one, for the conversation clock: its messages
        list, the messages it adds to its parent's (the others are shared with the parent's and
        the memo's) and its response object."""
        with self._lock:
            if self._recent.get((tenant, record.id)) is not record:
                return None
        nbytes = (sys.getsizeof(record.messages) + sum(map(_message_bytes, record.messages[record.shared:]))
                  + json_bytes(record.response))
        return Held("response", (tenant, record.id), nbytes, lambda: self.forget(tenant, record.id))

    def forget(self, tenant: str, id: str) -> None:
        """Drops the record from memory (the database keeps it)."""
        with self._lock:
            self._recent.pop((tenant, id), None)

    def _row(self, tenant: str, id: str, lock: str = "") -> tuple[str, str | None] | None:
        """(response, cache_key) of a visible record (under the lock)."""
        rows = self._db.execute(ROW + lock, {"tenant": tenant, "id": id})
        return rows[0] if rows else None

    def _keep(self, tenant: str, record: StoredResponse) -> None:
        self._recent[(tenant, record.id)] = record
        while len(self._recent) > RECENT:
            self._recent.popitem(last=False)

    @contextlib.contextmanager
    def _failures(self, what: str) -> Iterator[None]:
        """The database's failures as the protocol's: a busy lock or a lost connection may
        pass (503), damage will not (500)."""
        try:
            yield
        except self._db.errors as exc:
            retry = self._db.retryable(exc)
            log.warning("response store %s: %s (%s)", self._db.where, what, exc)
            raise RequestError(f"the response store {what}: {exc}", status=503 if retry else 500,
                               code="response_store_busy" if retry else "response_store_damaged") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()
