"""Asynchronous, bounded snapshot writes: the engine hands over host copies of evicted blocks
and moves on; one thread batches them into blobs.

The queue is bounded in bytes: a producer that would exceed it waits (back-pressure),
so a burst of evictions costs host memory up to the bound and never more. Blocks queued
together with the same scope become one blob, one fsync.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Union

import numpy as np

from zllm_core.cache.snapshot_store import SessionRecord, SnapshotStore, disk_full

log = logging.getLogger("zllm.cache")

MAX_BLOB_BYTES = 256 << 20


@dataclass(frozen=True)
class BlockBackup:
    scope: bytes
    keys: tuple[bytes, ...]
    data: np.ndarray  # uint8 [len(keys), bytes_per_block]


@dataclass
class WriterStats:
    blobs: int = 0
    bytes_written: int = 0
    write_errors: int = 0
    waits: int = 0  # puts that waited for the queue to drain


class SnapshotWriter:
    def __init__(self, store: SnapshotStore, max_pending_bytes: int = 512 << 20):
        self.store = store
        self.max_pending_bytes = max_pending_bytes
        self.stats = WriterStats()
        self.pending_keys: set[bytes] = set()  # queued, not yet indexed
        self._queue: deque[Union[BlockBackup, SessionRecord]] = deque()
        self._pending_bytes = 0
        self._busy = False
        self._closed = False
        self._disk_full = False  # the last write failed for lack of room
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="zllm-snapshot-writer", daemon=True)
        self._thread.start()

    def put(self, item: Union[BlockBackup, SessionRecord]) -> None:
        size = _nbytes(item)
        with self._cond:
            if self._pending_bytes and self._pending_bytes + size > self.max_pending_bytes:
                self.stats.waits += 1
                self._cond.wait_for(lambda: not self._pending_bytes or
                                    self._pending_bytes + size <= self.max_pending_bytes)
            self._queue.append(item)
            self._pending_bytes += size
            if isinstance(item, BlockBackup):
                self.pending_keys.update(item.keys)
            self._cond.notify_all()

    def has_room(self, nbytes: int) -> bool:
        """Whether a put of ``nbytes`` would be queued now, without waiting (advisory)."""
        return not self._pending_bytes or self._pending_bytes + nbytes <= self.max_pending_bytes

    def flush(self) -> None:
        """Wait until everything queued so far is on disk and indexed."""
        with self._cond:
            self._cond.wait_for(lambda: not self._queue and not self._busy)

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    break
                batch, self._queue = list(self._queue), deque()
                self._busy = True
            try:
                self._write(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
        self.store.close()

    def _write(self, batch: list[Union[BlockBackup, SessionRecord]]) -> None:
        blocks: dict[bytes, list[BlockBackup]] = {}
        for item in batch:
            if isinstance(item, BlockBackup):
                blocks.setdefault(item.scope, []).append(item)
        for scope, items in blocks.items():
            for group in _groups(items):
                self._commit(scope, group)
        for item in batch:  # after the blocks they name are indexed
            if isinstance(item, SessionRecord):
                self._guarded(self.store.put_session, item)
                self._done((), _nbytes(item))

    def _commit(self, scope: bytes, group: list[BlockBackup]) -> None:
        keys = [k for item in group for k in item.keys]
        data = group[0].data if len(group) == 1 else np.concatenate([item.data for item in group])
        if self._guarded(self.store.commit, scope, keys, data):
            self.stats.blobs += 1
            self.stats.bytes_written += data.nbytes
        self._done(keys, data.nbytes)

    def _done(self, keys: list[bytes] | tuple, nbytes: int) -> None:
        with self._cond:
            self.pending_keys.difference_update(keys)
            self._pending_bytes -= nbytes
            self._cond.notify_all()

    def _guarded(self, fn, *args) -> bool:
        """A failed write (disk full, permissions) loses a backup, never the engine. A full
        disk is an operating condition, not a bug: one line when writes start failing and
        one when they recover; /metrics counts every failure."""
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001
            self.stats.write_errors += 1
            if not disk_full(exc):
                log.exception("snapshot write failed")
            elif not self._disk_full:
                log.warning("snapshot writes fail, the SSD cache directory is full (%s): backups are "
                            "skipped until there is room", exc)
            self._disk_full = disk_full(exc)
            return False
        if self._disk_full:
            log.warning("snapshot writes succeed again")
            self._disk_full = False
        return True


def _nbytes(item: Union[BlockBackup, SessionRecord]) -> int:
    """What an item holds in host memory while queued: the bound counts it all."""
    return item.data.nbytes if isinstance(item, BlockBackup) else item.tokens.nbytes


def _groups(items: list[BlockBackup]) -> list[list[BlockBackup]]:
    """Consecutive backups, up to MAX_BLOB_BYTES per blob."""
    groups: list[list[BlockBackup]] = [[]]
    size = 0
    for item in items:
        if groups[-1] and size + item.data.nbytes > MAX_BLOB_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += item.data.nbytes
    return groups
