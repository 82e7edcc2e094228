"""The asynchronous snapshot writer: bounded in bytes, batching, and never fatal."""
import os

import numpy as np

from zllm_core.cache.snapshot_store import SnapshotStore
from zllm_core.cache.snapshot_writer import BlockBackup, SnapshotWriter

from crash_writer import LAYOUT, SCOPE, block_bytes


def backup(n):
    keys = tuple(os.urandom(32) for _ in range(n))
    return BlockBackup(SCOPE, keys, np.stack([block_bytes(k) for k in keys]))


def test_a_producer_past_the_bound_waits_and_everything_is_written(tmp_path):
    store = SnapshotStore(tmp_path, LAYOUT, 1 << 30)
    writer = SnapshotWriter(store, max_pending_bytes=8 * LAYOUT.bytes_per_block)
    items = [backup(6) for _ in range(20)]
    for item in items:
        writer.put(item)
    writer.close()
    assert writer.stats.waits > 0 and writer.stats.write_errors == 0
    assert writer.stats.bytes_written == 120 * LAYOUT.bytes_per_block and not writer.pending_keys
    keys = [k for item in items for k in item.keys]
    assert len(SnapshotStore(tmp_path, LAYOUT, 1 << 30).locate(keys)) == 120


def test_a_failed_write_is_counted_and_the_writer_goes_on(tmp_path):
    store = SnapshotStore(tmp_path, LAYOUT, 1 << 30)
    writer = SnapshotWriter(store)
    blobs = tmp_path / "blobs"
    blobs.rename(tmp_path / "away")
    blobs.write_text("not a directory")  # the commit's open fails, even for root
    writer.put(backup(3))
    writer.flush()
    blobs.unlink()
    (tmp_path / "away").rename(blobs)
    writer.put(backup(3))
    writer.close()
    assert writer.stats.write_errors == 1 and writer.stats.blobs == 1 and not writer.pending_keys
