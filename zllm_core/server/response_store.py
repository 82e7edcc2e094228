"""Stored responses: what previous_response_id needs to rebuild a conversation after a restart.

A record holds the response object (for GET /v1/responses/{id}) and the whole canonical
conversation up to and including that response's output, plus its cache key. It owns no model
state: rebuilding the conversation only recreates the prompt; whether the prefix is still cached
is the engine's business. Records are scoped by tenant, written in one transaction, and treated
as untrusted on read (a record that does not validate is reported missing, never half-used).
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zllm_core.protocols.canonical import Message, ToolCall

log = logging.getLogger("zllm.server")
ROLES = ("system", "developer", "user", "assistant", "tool")

SCHEMA = """CREATE TABLE IF NOT EXISTS responses (
    tenant TEXT NOT NULL, id TEXT NOT NULL, created_at REAL NOT NULL,
    response TEXT NOT NULL, messages TEXT NOT NULL, cache_key TEXT,
    PRIMARY KEY (tenant, id))"""


@dataclass
class StoredResponse:
    id: str
    response: dict[str, Any]
    messages: list[Message]
    cache_key: str | None = None


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
    def __init__(self, path: str | Path):
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(SCHEMA)

    def put(self, tenant: str, record: StoredResponse) -> None:
        row = (tenant, record.id, time.time(), json.dumps(record.response),
               json.dumps([asdict(m) for m in record.messages]), record.cache_key)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", row)

    def get(self, tenant: str, id: str) -> StoredResponse | None:
        with self._lock:
            row = self._db.execute(
                "SELECT response, messages, cache_key FROM responses WHERE tenant=? AND id=?",
                (tenant, id)).fetchone()
        if row is None:
            return None
        try:
            response = json.loads(row[0])
            messages = [_message_from(m) for m in json.loads(row[1])]
            if not isinstance(response, dict) or response.get("id") != id:
                raise ValueError("response object does not match its id")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("stored response %s is unreadable (%s); treating it as missing", id, exc)
            return None
        return StoredResponse(id=id, response=response, messages=messages, cache_key=row[2])

    def delete(self, tenant: str, id: str) -> bool:
        with self._lock:
            cur = self._db.execute("DELETE FROM responses WHERE tenant=? AND id=?", (tenant, id))
        return cur.rowcount > 0

    def close(self) -> None:
        with self._lock:
            self._db.close()
