"""Restore: located disk blocks back into the pool, reads overlapped with copies.

A restore is planned in stages (runs of consecutive slots in one blob, a few MiB each).
Every blob's header is validated before anything is allocated; a reader thread then
reads each stage with one contiguous read and checks every block's checksum, and
publishes the stage; the caller's thread waits only for the stage it copies next, takes
its blocks from the pool (the allocator evicts before it admits) and copies in, while the
reader is already on the next stage. Blocks reach the caller only when every stage is in:
a block being restored is never visible to compute, and a failure returns every block.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import BinaryIO, Callable, Optional, Sequence

import numpy as np
import torch

from zllm_core.cache.kv_storage import KVStorage
from zllm_core.cache.snapshot_format import BadSnapshot, BlobHeader, verify
from zllm_core.cache.snapshot_store import BlockLocation, SnapshotStore

STAGE_BYTES = 8 << 20
DEPTH = 2  # stages read ahead of the copy


@dataclass(frozen=True)
class Stage:
    location: BlockLocation  # of the stage's first block
    first_slot: int
    positions: list[int]  # where each block of the stage goes in the restored run


class RestoreFailed(RuntimeError):
    def __init__(self, message: str, bad: Optional[BlockLocation] = None):
        super().__init__(message)
        self.bad = bad  # the blob to quarantine, when the failure is the blob's


def plan(locations: Sequence[BlockLocation], bytes_per_block: int) -> list[Stage]:
    """Consecutive slots of one blob become one stage, capped at STAGE_BYTES; stages go in
    file order (eviction writes a run tail first, so its blob holds it backwards)."""
    cap = stage_blocks(bytes_per_block)
    stages: list[Stage] = []
    order = sorted(range(len(locations)), key=lambda p: (locations[p].snapshot, locations[p].slot))
    for pos in order:
        loc = locations[pos]
        last = stages[-1] if stages else None
        if (last is not None and last.location.snapshot == loc.snapshot and len(last.positions) < cap
                and last.first_slot + len(last.positions) == loc.slot):
            last.positions.append(pos)
        else:
            stages.append(Stage(loc, loc.slot, [pos]))
    return stages


def stage_blocks(bytes_per_block: int) -> int:
    return max(1, STAGE_BYTES // bytes_per_block)


def staging_buffers(bytes_per_block: int) -> np.ndarray:
    """Host buffers restores read into, kept: fresh memory per stage costs a page fault per page.
    DEPTH + 2 of them: one being filled, DEPTH published, one being copied."""
    return np.empty((DEPTH + 2, stage_blocks(bytes_per_block), bytes_per_block), dtype=np.uint8)


def restore(store: SnapshotStore, storage: KVStorage, locations: Sequence[BlockLocation], scope: bytes,
            allocate: Callable[[int], list[int]], release: Callable[[list[int]], None],
            staging: np.ndarray) -> list[int]:
    """Blocks holding the located K/V, in ``locations`` order; raises RestoreFailed having
    released every block it took."""
    blobs = _open_all(store, locations, scope)
    stages = plan(locations, store.layout.bytes_per_block)
    reader = _Reader(blobs, stages, staging)
    blocks = np.full(len(locations), -1, dtype=np.int64)
    taken: list[int] = []
    try:
        for stage, data in reader:
            ids = allocate(len(stage.positions))
            taken += ids
            storage.scatter(ids, _as_kv(data, storage, len(ids)))
            blocks[stage.positions] = ids
        return blocks.tolist()
    except BaseException:
        if taken:
            release(taken)
        raise
    finally:
        reader.stop()
        for f, _ in blobs.values():
            f.close()


def _open_all(store: SnapshotStore, locations: Sequence[BlockLocation],
              scope: bytes) -> dict[int, tuple[BinaryIO, BlobHeader]]:
    blobs: dict[int, tuple[BinaryIO, BlobHeader]] = {}
    try:
        for loc in locations:
            if loc.snapshot not in blobs:
                blobs[loc.snapshot] = _open(store, loc, scope)
            header = blobs[loc.snapshot][1]
            # The index and the blob must name the same block: checksums are seeded with the
            # blob's own keys, so only this catches a blob that is not the one indexed.
            if loc.slot >= header.num_blocks or header.keys[loc.slot] != loc.key:
                raise RestoreFailed(f"slot {loc.slot} of blob {loc.generation} holds another block", loc)
    except BaseException:
        for f, _ in blobs.values():
            f.close()
        raise
    return blobs


def _open(store: SnapshotStore, loc: BlockLocation, scope: bytes) -> tuple[BinaryIO, BlobHeader]:
    try:
        return store.open_blob(loc, scope)
    except FileNotFoundError:
        raise RestoreFailed("blob dropped since it was located") from None
    except (BadSnapshot, OSError) as exc:
        raise RestoreFailed(f"blob {loc.generation}: {exc}", loc) from None


def _as_kv(data: np.ndarray, storage: KVStorage, n: int) -> torch.Tensor:
    lay = storage.layout
    return torch.from_numpy(data).view(lay.dtype).view(
        n, lay.num_layers, 2, lay.block_size, lay.num_kv_heads, lay.head_dim)


class _Reader:
    """Reads and verifies stages on its own thread, at most DEPTH ahead of the consumer."""

    def __init__(self, blobs: dict[int, tuple[BinaryIO, BlobHeader]], stages: list[Stage], staging: np.ndarray):
        self.blobs, self.stages, self.staging = blobs, stages, staging
        self.block_bytes = staging.shape[2]
        self._out: queue.Queue = queue.Queue(maxsize=DEPTH)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zllm-snapshot-reader", daemon=True)
        self._thread.start()

    def __iter__(self):
        for _ in self.stages:
            item = self._out.get()
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self) -> None:
        self._stop.set()  # a reader waiting on a full queue sees it within 50 ms
        self._thread.join()

    def _run(self) -> None:
        for i, stage in enumerate(self.stages):
            if self._stop.is_set():
                return
            try:
                item = (stage, self._read(stage, self.staging[i % len(self.staging)]))
            except RestoreFailed as exc:
                item = exc
            except OSError as exc:
                item = RestoreFailed(f"read failed: {exc}", stage.location)
            self._put(item)
            if isinstance(item, BaseException):
                return

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._out.put(item, timeout=0.05)
                return
            except queue.Full:
                pass

    def _read(self, stage: Stage, buffer: np.ndarray) -> np.ndarray:
        f, header = self.blobs[stage.location.snapshot]
        n = len(stage.positions)
        data = buffer[:n]
        f.seek(header.data_offset + stage.first_slot * self.block_bytes)
        if f.readinto(memoryview(data).cast("B")) != data.nbytes:
            raise RestoreFailed("short read", stage.location)
        for i in range(n):
            if not verify(header, stage.first_slot + i, data[i]):
                raise RestoreFailed(f"checksum of block {stage.first_slot + i} in blob "
                                    f"{stage.location.generation}", stage.location)
        return data
