"""The prefix cache's second level: what the device tier evicts is backed up to local disk and
restored into the pool on a later hit, across restarts.

The device tier calls `backup` with blocks it is about to evict (their K/V is copied to
host memory before the blocks are freed; the disk write is asynchronous) and `locate` /
`restore` on a device miss. Keys are the device tier's scoped chained keys, so a snapshot
never serves another scope; a blob that fails validation is quarantined and counted, and
the request continues as a miss.
"""
from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from zllm_core.cache import snapshot_reader
from zllm_core.cache.block_pool import OutOfBlocks
from zllm_core.cache.kv_storage import KVLayout, KVStorage
from zllm_core.cache.snapshot_format import BlobLayout
from zllm_core.cache.snapshot_reader import RestoreFailed
from zllm_core.cache.snapshot_store import BlockLocation, SessionRecord, SnapshotStore
from zllm_core.cache.snapshot_writer import BlockBackup, SnapshotWriter

log = logging.getLogger("zllm.cache")

BACKUP_BATCH_BYTES = 64 << 20  # one host copy at a time, so a large backup streams through the queue


@dataclass(frozen=True)
class SSDConfig:
    directory: str
    budget_bytes: int = 64 << 30
    max_pending_bytes: int = 512 << 20
    # Back a finished request's blocks up now, not at eviction: engines sharing the directory
    # (cluster replicas) then restore a conversation that moves, or outlives a killed replica.
    write_through: bool = False


@dataclass
class SSDStats:
    hits: int = 0  # restores that brought blocks back
    restored_tokens: int = 0
    bytes_read: int = 0
    restore_seconds: float = 0.0  # summed over hits
    failed_restores: int = 0
    quarantined: int = 0
    backed_up_blocks: int = 0


def blob_layout(layout: KVLayout) -> BlobLayout:
    return BlobLayout(layout.num_layers, layout.num_kv_heads, layout.head_dim, layout.block_size,
                      str(layout.dtype).removeprefix("torch."))


class SSDTier:
    def __init__(self, storage: KVStorage, config: SSDConfig):
        self.storage = storage
        self.layout = storage.layout
        self.config = config
        self.store = SnapshotStore(config.directory, blob_layout(self.layout), config.budget_bytes)
        self.writer = SnapshotWriter(self.store, config.max_pending_bytes)
        self.stats = SSDStats()
        self._batch = max(1, BACKUP_BATCH_BYTES // self.layout.bytes_per_block)
        self._staging = snapshot_reader.staging_buffers(self.layout.bytes_per_block)

    def holds(self, key: bytes) -> bool:
        """On disk, or queued to be."""
        return key in self.store.keys or key in self.writer.pending_keys

    def backup(self, scopes: Sequence[bytes], keys: Sequence[bytes], blocks: Sequence[int],
               wait: bool = True) -> None:
        """Copy the blocks the disk lacks to host memory and queue them for writing; without
        ``wait``, only while the queue has room (the engine never waits on the disk for it)."""
        by_scope: dict[bytes, list[int]] = {}
        for i, key in enumerate(keys):
            if not self.holds(key):
                by_scope.setdefault(scopes[i], []).append(i)
        for scope, picked in by_scope.items():
            for start in range(0, len(picked), self._batch):
                part = picked[start:start + self._batch]
                if not wait and not self.writer.has_room(len(part) * self.layout.bytes_per_block):
                    return
                data = self.storage.gather([blocks[i] for i in part]).cpu().contiguous()
                self.writer.put(BlockBackup(scope, tuple(keys[i] for i in part),
                                            data.view(torch.uint8).reshape(len(part), -1).numpy()))
                self.stats.backed_up_blocks += len(part)

    def write_through(self, scope: bytes, keys: Sequence[bytes], blocks: Sequence[int]) -> None:
        """A finished request's blocks, backed up now when the writer has room; what it
        skips is backed up at eviction as usual."""
        self.backup([scope] * len(keys), keys, blocks, wait=False)

    def record_session(self, record: SessionRecord) -> None:
        self.writer.put(record)

    def session(self, scope: bytes, cache_id: str) -> Optional[SessionRecord]:
        return self.store.latest_session(scope, cache_id)

    def locate(self, keys: Sequence[bytes]) -> list[BlockLocation]:
        return self.store.locate(keys)

    def restore(self, located: Sequence[BlockLocation], scope: bytes,
                allocate: Callable[[int], list[int]], release: Callable[[list[int]], None]) -> Optional[list[int]]:
        """Blocks from ``allocate`` holding the located K/V, or None on failure, every block
        taken handed to ``release``."""
        start = time.perf_counter()
        try:
            blocks = snapshot_reader.restore(self.store, self.storage, located, scope, allocate, release,
                                             self._staging)
        except RestoreFailed as exc:
            self.stats.failed_restores += 1
            if exc.bad is not None:
                self.stats.quarantined += 1
                log.warning("SSD snapshot %d quarantined: %s", exc.bad.generation, exc)
                try:
                    self.store.quarantine(exc.bad)
                except (OSError, sqlite3.Error) as failed:  # a full disk: the next failed restore tries again
                    log.warning("SSD tier: could not quarantine snapshot %d (%s)", exc.bad.generation, failed)
            return None
        except OutOfBlocks:
            self.stats.failed_restores += 1
            return None
        try:
            self.store.touch(sorted({loc.snapshot for loc in located}))
        except sqlite3.Error as exc:  # recency is a hint for the budget; the restore stands
            log.warning("SSD tier: could not mark snapshots used (%s)", exc)
        self.stats.hits += 1
        self.stats.restored_tokens += len(blocks) * self.layout.block_size
        self.stats.bytes_read += len(blocks) * self.layout.bytes_per_block
        self.stats.restore_seconds += time.perf_counter() - start
        return blocks

    def metrics(self) -> dict[str, float]:
        s, w = self.stats, self.writer.stats
        return {"hits": s.hits, "restored_tokens": s.restored_tokens, "bytes_read": s.bytes_read,
                "bytes_written": w.bytes_written, "restore_seconds": s.restore_seconds,
                "failed_restores": s.failed_restores, "quarantined": s.quarantined,
                "backed_up_blocks": s.backed_up_blocks, "write_errors": w.write_errors,
                "queue_waits": w.waits, "stored_blocks": len(self.store.keys),
                "orphans_collected": self.store.orphans_collected}

    def close(self) -> None:
        self.writer.close()
        self.store.close()
