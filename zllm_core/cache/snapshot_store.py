"""Snapshots on local disk: blob files plus a SQLite (WAL) index, switched at a commit boundary.

A blob is written under a temporary name, fsynced, renamed to its generation's name and
the directory fsynced; only then does one SQLite transaction index it. A crash at any
point leaves the index on the old state or the new, never on a half-written blob; what a
crash leaves behind (temporary files, renamed blobs no row names) is collected at open.

The index is content-addressed: a chained block key (which carries scope and history)
names one block slot in one blob, so branches that share history share disk blocks.
Session records (cache id, scope, tokens, keys, parent, round) let an exact cache id find
its blocks after a restart. The byte budget evicts whole blobs, least recently used first.

Engines on one host may share a directory (cluster replicas: a conversation that moves restores
what another engine wrote). Generations come from a counter in the index, bumped in a write
transaction, so two writers never number a blob alike; lookups ask the index, which sees every
engine's commits; and what a crash left is collected only by an opener that finds the directory
unused, so nobody takes another engine's blobs in flight.
Torch-free: a test's writer process imports only this, numpy and xxhash.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, Optional, Sequence

import numpy as np

from zllm_core.cache.snapshot_format import BlobHeader, BlobLayout, encode_header, read_header

log = logging.getLogger("zllm.cache")

SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    id INTEGER PRIMARY KEY, generation INTEGER UNIQUE NOT NULL, scope BLOB NOT NULL,
    num_blocks INTEGER NOT NULL, bytes INTEGER NOT NULL, last_used REAL NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (
    key BLOB PRIMARY KEY, snapshot INTEGER NOT NULL, slot INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS blocks_by_snapshot ON blocks(snapshot);
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY, scope BLOB NOT NULL, cache_id TEXT NOT NULL, round INTEGER NOT NULL,
    parent INTEGER, tokens BLOB NOT NULL, key_len INTEGER NOT NULL, keys BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_by_id ON sessions(scope, cache_id);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
_BATCH = 900  # below SQLite's default limit of bound parameters
MAX_SESSIONS = 1024
SESSION_ROUNDS = 4


@dataclass(frozen=True)
class BlockLocation:
    key: bytes
    snapshot: int
    generation: int
    slot: int


@dataclass(frozen=True)
class SessionRecord:
    scope: bytes
    cache_id: str
    tokens: np.ndarray  # int32
    keys: tuple[bytes, ...]
    parent: Optional[int] = None
    round: int = 0


class SnapshotStore:
    def __init__(self, directory: str | Path, layout: BlobLayout, budget_bytes: int):
        self.dir = Path(directory)
        self.blobs = self.dir / "blobs"
        self.quarantined = self.dir / "quarantine"
        for d in (self.blobs, self.quarantined):
            d.mkdir(parents=True, exist_ok=True)
        self._dir_lock, alone = _lock(self.dir)
        self.layout = layout
        self.budget_bytes = budget_bytes
        self._local = threading.local()
        self._lock = threading.Lock()  # the key set
        self._db().executescript(SCHEMA)
        # Every block key indexed when this process looked: spares backing up a block twice.
        # Other engines sharing the directory add and drop keys behind it; lookups ask the index.
        self.keys: set[bytes] = set()
        self.orphans_collected = self._collect_orphans() if alone else 0
        if alone:
            fcntl.flock(self._dir_lock, fcntl.LOCK_SH)  # now others may share it
        self._start_counter()
        self.keys.update(k for (k,) in self._db().execute("SELECT key FROM blocks"))

    def _db(self) -> sqlite3.Connection:
        """One connection per thread: the writer commits while the engine thread looks up."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.dir / "index.sqlite3", timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            # NORMAL: a power loss may roll back the newest index transactions, never corrupt
            # them, and a blob is fsynced before its row: the worst case is an orphan.
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def blob_path(self, generation: int) -> Path:
        return self.blobs / f"{generation:012d}.zkv"

    # -- writing (the writer thread) ----------------------------------------------------

    def _start_counter(self) -> None:
        """Generations continue past every blob named in the index or on disk (a directory
        written before the counter existed included)."""
        gens = [int(p.name.split(".")[0]) for p in self.blobs.iterdir() if p.name.split(".")[0].isdigit()]
        db = self._db()
        with _transaction(db):
            row = db.execute("SELECT MAX(generation) FROM snapshots").fetchone()
            db.execute("INSERT INTO counters VALUES ('generation', ?) ON CONFLICT(name) "
                       "DO UPDATE SET value = MAX(value, excluded.value)", (max([row[0] or 0, *gens]),))

    def _next_generation(self) -> int:
        db = self._db()
        with _transaction(db):
            (row,) = db.execute("UPDATE counters SET value = value + 1 WHERE name = 'generation' "
                                "RETURNING value").fetchall()  # stepped to its end before the commit
            return row[0]

    def commit(self, scope: bytes, keys: Sequence[bytes], data: np.ndarray) -> int:
        """Write ``data`` (uint8 [n, bytes_per_block]) as one blob and index it; its generation.

        Room is made first (least recently used blobs dropped past the budget). A write that
        fails takes its file with it: on a full disk, a half-written blob would keep it full.
        A full disk lowers the budget to what the index holds, so the next blob replaces old
        ones instead of failing too."""
        generation = self._next_generation()
        header = encode_header(self.layout, scope, generation, keys, data)
        size = len(header) + data.nbytes
        self._enforce_budget(room=size)
        final = self.blob_path(generation)
        tmp = final.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(header)
                f.write(memoryview(np.ascontiguousarray(data)).cast("B"))
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, final)
            _fsync_dir(self.blobs)
            db = self._db()
            with _transaction(db):
                cur = db.execute("INSERT INTO snapshots(generation, scope, num_blocks, bytes, last_used) "
                                 "VALUES (?, ?, ?, ?, ?)", (generation, scope, len(keys), size, time.time()))
                db.executemany("INSERT OR IGNORE INTO blocks(key, snapshot, slot) VALUES (?, ?, ?)",
                               [(k, cur.lastrowid, i) for i, k in enumerate(keys)])
        except (OSError, sqlite3.Error) as exc:
            for path in (tmp, final):  # no row names either: the transaction rolled back
                path.unlink(missing_ok=True)
            if disk_full(exc):
                self._fit_budget_to_disk()
            raise
        with self._lock:
            self.keys.update(keys)
        return generation

    def put_session(self, record: SessionRecord) -> None:
        db = self._db()
        with _transaction(db):
            db.execute("INSERT INTO sessions(scope, cache_id, round, parent, tokens, key_len, keys) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (record.scope, record.cache_id, record.round, record.parent,
                        np.ascontiguousarray(record.tokens, dtype="<i4").tobytes(),
                        len(record.keys[0]) if record.keys else 0, b"".join(record.keys)))
            db.execute("DELETE FROM sessions WHERE scope = ? AND cache_id = ? AND id NOT IN (SELECT id FROM "
                       "sessions WHERE scope = ? AND cache_id = ? ORDER BY id DESC LIMIT ?)",
                       (record.scope, record.cache_id, record.scope, record.cache_id, SESSION_ROUNDS))
            db.execute("DELETE FROM sessions WHERE id NOT IN (SELECT id FROM sessions ORDER BY id DESC LIMIT ?)",
                       (MAX_SESSIONS,))

    def _enforce_budget(self, room: int = 0) -> None:
        """Drop least recently used blobs until ``room`` more bytes fit in the budget."""
        db = self._db()
        total = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM snapshots").fetchone()[0]
        for snapshot, generation, size in db.execute(
                "SELECT id, generation, bytes FROM snapshots ORDER BY last_used").fetchall():
            if total + room <= self.budget_bytes:
                return
            self._drop(snapshot, generation)
            total -= size

    def _fit_budget_to_disk(self) -> None:
        held = self.num_bytes()
        if held < self.budget_bytes:
            log.warning("SSD cache directory %s is full at %d bytes of snapshots: the tier's budget is "
                        "lowered from %d to that, older snapshots make room for newer ones",
                        self.dir, held, self.budget_bytes)
            self.budget_bytes = held

    def _drop(self, snapshot: int, generation: int, to: Optional[Path] = None) -> None:
        """Unindex a blob, then remove (or move) its file: a crash between leaves an orphan."""
        db = self._db()
        with _transaction(db):
            keys = [k for (k,) in db.execute("SELECT key FROM blocks WHERE snapshot = ?", (snapshot,))]
            db.execute("DELETE FROM blocks WHERE snapshot = ?", (snapshot,))
            db.execute("DELETE FROM snapshots WHERE id = ?", (snapshot,))
        with self._lock:
            self.keys.difference_update(keys)
        path = self.blob_path(generation)
        try:
            if to is None:
                path.unlink()
            else:
                os.replace(path, to / path.name)
        except FileNotFoundError:
            pass

    # -- reading (the engine thread) ----------------------------------------------------

    def locate(self, keys: Sequence[bytes]) -> list[BlockLocation]:
        """Where the longest leading run of ``keys`` lives on disk, as the index says now
        (another engine sharing the directory may have written it), a batch at a time."""
        out: list[BlockLocation] = []
        for i in range(0, len(keys), _BATCH):
            batch = list(keys[i:i + _BATCH])
            rows = self._db().execute(
                "SELECT b.key, b.snapshot, s.generation, b.slot FROM blocks b JOIN snapshots s ON s.id = b.snapshot "
                f"WHERE b.key IN ({','.join('?' * len(batch))})", batch)
            found = {k: BlockLocation(k, s, g, slot) for k, s, g, slot in rows}
            with self._lock:
                self.keys.update(found)
            for key in batch:
                if key not in found:
                    return out
                out.append(found[key])
        return out

    def open_blob(self, location: BlockLocation, scope: bytes) -> tuple[BinaryIO, BlobHeader]:
        """The validated header of a blob and its open file (FileNotFoundError: dropped since)."""
        f = open(self.blob_path(location.generation), "rb", buffering=0)
        try:
            return f, read_header(f, self.layout, scope, location.generation)
        except BaseException:
            f.close()
            raise

    def touch(self, snapshots: Sequence[int]) -> None:
        db = self._db()
        db.executemany("UPDATE snapshots SET last_used = ? WHERE id = ?", [(time.time(), s) for s in snapshots])

    def quarantine(self, location: BlockLocation) -> None:
        """Take a blob that failed validation out of the index, keeping the file to inspect."""
        self._drop(location.snapshot, location.generation, to=self.quarantined)

    def latest_session(self, scope: bytes, cache_id: str) -> Optional[SessionRecord]:
        row = self._db().execute("SELECT tokens, key_len, keys, parent, round FROM sessions WHERE scope = ? AND "
                                 "cache_id = ? ORDER BY id DESC LIMIT 1", (scope, cache_id)).fetchone()
        if row is None:
            return None
        tokens, width, keys, parent, rnd = row
        return SessionRecord(scope, cache_id, np.frombuffer(tokens, dtype="<i4").astype(np.int32),
                             tuple(keys[i:i + width] for i in range(0, len(keys), width or 1)), parent, rnd)

    def num_bytes(self) -> int:
        return self._db().execute("SELECT COALESCE(SUM(bytes), 0) FROM snapshots").fetchone()[0]

    # -- start --------------------------------------------------------------------------

    def _collect_orphans(self) -> int:
        """Remove what a crash left: temporary blobs, blobs no row names, rows with no blob."""
        db = self._db()
        indexed = {g: s for s, g in db.execute("SELECT id, generation FROM snapshots")}
        removed = 0
        for path in self.blobs.iterdir():
            stem = path.name.split(".")[0]
            if path.suffix != ".zkv" or not stem.isdigit() or int(stem) not in indexed:
                path.unlink()
                removed += 1
        for generation, snapshot in indexed.items():
            if not self.blob_path(generation).exists():
                self._drop(snapshot, generation)
        return removed

    def close(self) -> None:
        """Close this thread's connection and give up the directory."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
        if not self._dir_lock.closed:
            self._dir_lock.close()


class _transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *_):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


def _lock(directory: Path) -> tuple[IO[str], bool]:
    """The directory's lock file, held shared by every engine using it, and whether this one
    is alone (it holds the lock exclusively until it has collected what a crash left: nobody
    else's blobs are in flight then). The kernel releases it when the holder dies, kill -9
    included."""
    f = open(directory / "lock", "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return f, True
    except BlockingIOError:
        fcntl.flock(f, fcntl.LOCK_SH)  # waits while an opener that was alone collects
        return f, False


def disk_full(exc: BaseException) -> bool:
    """ENOSPC or a quota from the filesystem, SQLITE_FULL from the index."""
    if isinstance(exc, sqlite3.Error):
        return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
