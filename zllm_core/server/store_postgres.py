"""The response store on PostgreSQL: one store for ingresses on many hosts (SQLite's locking
does not cross hosts).

Waits are bounded as SQLite's are: `busy_seconds` to connect and for a row another writer
holds (lock_timeout); past it the operation fails as retryable. The connection is opened at
start (an unreachable server stops `zllm serve` with the reason) and again after it breaks (a
server restart, a cut network): the operation that finds it broken fails as retryable and the
next one reconnects. A write locks the rows it depends on for its transaction (a continuation
shares its parent's, a delete takes its own), so a parent is never deleted between a
continuation's check and its insert.
"""
from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator

import psycopg

_PARAM = re.compile(r"(?<![:\w]):([a-z_]+)")  # the store's :name parameters, as psycopg's %(name)s


class PostgresDatabase:
    errors = (psycopg.Error,)
    share_lock, update_lock = " FOR SHARE", " FOR UPDATE"

    def __init__(self, url: str, busy_seconds: float, schema: tuple[str, ...]):
        self.url, self.busy_seconds = url, busy_seconds
        self.where = re.sub(r"://([^:/@]*):[^@/]*@", r"://\1:***@", url)  # logs never show a password
        self._sql: dict[str, str] = {}
        self._conn: psycopg.Connection | None = None
        with self.transaction():
            # Ingresses starting together would race to create the table: one at a time.
            self.execute("SELECT pg_advisory_xact_lock(hashtext('zllm.responses'))", {})
            for statement in schema:
                self.execute(statement, {})

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                self._conn.close()
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, round(self.busy_seconds)))
            self._conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(self.busy_seconds * 1000)}ms",))
        return self._conn

    def execute(self, sql: str, params: dict[str, Any]) -> list[tuple]:
        query = self._sql.get(sql)
        if query is None:
            query = self._sql[sql] = _PARAM.sub(r"%(\1)s", sql)
        with self._connection().cursor() as cursor:
            cursor.execute(query, params)  # type: ignore[arg-type]  # the store's own SQL
            return cursor.fetchall() if cursor.description is not None else []

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._connection().transaction():
            yield

    def retryable(self, exc: Exception) -> bool:
        """A lost connection, a lock held past the wait, a server shutting down: a retry may
        work. Anything else (bad data, a schema another program changed) will not."""
        return isinstance(exc, psycopg.OperationalError)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
