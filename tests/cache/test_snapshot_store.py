"""Snapshots on disk: the commit boundary, orphans, the LRU budget, and kill -9 mid-write."""
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.kv_storage import KVLayout, KVStorage
from zllm_core.cache.snapshot_format import verify
from zllm_core.cache.snapshot_store import SessionRecord, SnapshotStore
from zllm_core.cache.ssd_tier import SSDConfig, SSDTier

from crash_writer import BUDGET, LAYOUT, SCOPE, block_bytes

REPO = Path(__file__).resolve().parents[2]


def commit(store, n, seed):
    keys = [bytes([seed, i]) * 16 for i in range(n)]
    store.commit(SCOPE, keys, np.stack([block_bytes(k) for k in keys]))
    return keys


def reopen(store):
    store.close()
    return SnapshotStore(store.dir, LAYOUT, store.budget_bytes)


def read_block(store, location):
    f, header = store.open_blob(location, SCOPE)
    with f:
        f.seek(header.data_offset + location.slot * LAYOUT.bytes_per_block)
        data = np.frombuffer(f.read(LAYOUT.bytes_per_block), dtype=np.uint8)
    return header, data


def test_committed_blocks_are_found_again_after_reopening(tmp_path):
    store = SnapshotStore(tmp_path, LAYOUT, BUDGET)
    keys = commit(store, 10, 1)
    store = reopen(store)
    located = store.locate(keys + [b"x" * 32])
    assert [loc.slot for loc in located] == list(range(10))
    header, data = read_block(store, located[3])
    assert verify(header, 3, data) and np.array_equal(data, block_bytes(keys[3]))


def test_the_leading_run_stops_at_the_first_key_not_on_disk(tmp_path):
    store = SnapshotStore(tmp_path, LAYOUT, BUDGET)
    keys = commit(store, 6, 2)
    assert len(store.locate(keys[:2] + [b"y" * 32] + keys[2:])) == 2


def test_temporary_and_unindexed_blobs_are_collected_at_open(tmp_path):
    store = SnapshotStore(tmp_path, LAYOUT, BUDGET)
    commit(store, 4, 3)
    (tmp_path / "blobs" / "000000000099.tmp").write_bytes(b"half a blob")
    (tmp_path / "blobs" / "000000000098.zkv").write_bytes(b"renamed, never indexed")
    reopened = reopen(store)
    assert reopened.orphans_collected == 2
    assert sorted(p.name for p in (tmp_path / "blobs").iterdir()) == ["000000000001.zkv"]


def test_an_index_row_whose_blob_vanished_is_dropped_at_open(tmp_path):
    store = SnapshotStore(tmp_path, LAYOUT, BUDGET)
    keys = commit(store, 4, 4)
    store.blob_path(1).unlink()
    assert reopen(store).locate(keys) == []


def test_the_budget_drops_the_least_recently_used_blob(tmp_path):
    store = SnapshotStore(tmp_path, LAYOUT, 7 * 20 * LAYOUT.bytes_per_block)  # 3 blobs and their headers
    first, second = commit(store, 40, 5), commit(store, 40, 6)
    store.touch([1])  # the first was restored since: the second is now the older
    time.sleep(0.01)
    commit(store, 40, 7)
    commit(store, 40, 8)
    assert len(store.locate(first)) == 40 and store.locate(second) == []
    assert not store.blob_path(2).exists()
    assert store.num_bytes() <= store.budget_bytes


def test_session_records_keep_tokens_keys_and_rounds(tmp_path):
    store = SnapshotStore(tmp_path, LAYOUT, BUDGET)
    for rnd in range(6):
        store.put_session(SessionRecord(SCOPE, "conv", np.arange(8 + rnd, dtype=np.int32),
                                        (b"k" * 32, b"j" * 32), parent=rnd - 1 if rnd else None, round=rnd))
    store = reopen(store)
    latest = store.latest_session(SCOPE, "conv")
    assert latest.round == 5 and latest.parent == 4 and latest.keys == (b"k" * 32, b"j" * 32)
    assert np.array_equal(latest.tokens, np.arange(13))
    assert store.latest_session(b"t" * 32, "conv") is None  # another scope never sees it


def test_engines_on_one_host_share_a_directory(tmp_path):
    """Cluster replicas share one directory: a second opener takes none of the first's blobs in
    flight, generations never collide, and each finds what the other wrote."""
    first = SnapshotStore(tmp_path, LAYOUT, BUDGET)
    in_flight = first.blob_path(99).with_suffix(".tmp")
    in_flight.write_bytes(b"half a blob")
    second = SnapshotStore(tmp_path, LAYOUT, BUDGET)
    assert second.orphans_collected == 0 and in_flight.exists()
    ours, theirs = commit(first, 4, 1), commit(second, 4, 2)
    assert len(first.locate(theirs)) == 4 and len(second.locate(ours)) == 4
    assert len({loc.generation for loc in first.locate(ours) + first.locate(theirs)}) == 2
    second.close()
    first.close()
    alone = SnapshotStore(tmp_path, LAYOUT, BUDGET)  # the last one gone: a crash's leftovers go
    assert alone.orphans_collected == 1 and not in_flight.exists()
    alone.close()


def test_two_writer_processes_never_number_a_blob_alike(tmp_path):
    """Two processes commit blobs into one directory at once, dropping each other's under the
    budget; then every indexed block restores exactly."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, str(REPO / "tests/cache/crash_writer.py"), str(tmp_path)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.5)
    assert [proc.poll() for proc in procs] == [None, None], procs[0].stderr.read() + procs[1].stderr.read()
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    layout = KVLayout(LAYOUT.num_layers, LAYOUT.num_kv_heads, LAYOUT.head_dim, torch.float32, LAYOUT.block_size)
    storage = KVStorage(layout, BUDGET // LAYOUT.bytes_per_block)
    pool = BlockPool(storage.num_blocks, LAYOUT.block_size)
    tier = SSDTier(storage, SSDConfig(str(tmp_path), BUDGET))
    keys = list(tier.store.keys)
    blocks = tier.restore(tier.locate(keys), SCOPE, pool.allocate, pool.free)
    assert keys and blocks is not None and tier.stats.failed_restores == 0
    data = storage.gather(blocks).view(torch.uint8).reshape(len(blocks), -1).numpy()
    assert all(np.array_equal(row, block_bytes(k)) for k, row in zip(keys, data))
    tier.close()


def test_an_index_row_naming_another_blocks_slot_is_refused(tmp_path):
    store = SnapshotStore(tmp_path, LAYOUT, BUDGET)
    keys = commit(store, 4, 9)
    store._db().execute("UPDATE blocks SET slot = 2 WHERE key = ?", (keys[0],))  # the index lies
    pool = BlockPool(8, 4)
    store.close()
    tier = SSDTier(KVStorage(KVLayout(2, 1, 8, torch.float32, 4), 8), SSDConfig(str(tmp_path), BUDGET))
    assert tier.restore(tier.locate(keys[:1]), SCOPE, pool.allocate, pool.free) is None
    assert tier.stats.quarantined == 1 and pool.num_free == 8
    tier.close()


def test_kill_9_during_heavy_writing_never_leaves_a_corrupt_restore(tmp_path):
    """50 rounds: a writer process killed at a random moment, then every indexed block restored
    into a real pool through the SSD tier: each is exact (no restore fails: nothing
    half-written is ever indexed), and what the crash left is collected."""
    rng = random.Random(22)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    layout = KVLayout(LAYOUT.num_layers, LAYOUT.num_kv_heads, LAYOUT.head_dim, torch.float32, LAYOUT.block_size)
    storage = KVStorage(layout, BUDGET // LAYOUT.bytes_per_block)
    pool = BlockPool(storage.num_blocks, LAYOUT.block_size)
    restored = 0
    for _ in range(50):
        proc = subprocess.Popen([sys.executable, str(REPO / "tests/cache/crash_writer.py"), str(tmp_path)],
                                env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.25))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        tier = SSDTier(storage, SSDConfig(str(tmp_path), BUDGET))
        assert not list((tmp_path / "blobs").glob("*.tmp"))
        keys = list(tier.store.keys)
        blocks = tier.restore(tier.locate(keys), SCOPE, pool.allocate, pool.free) if keys else []
        assert blocks is not None and tier.stats.failed_restores == 0
        data = storage.gather(blocks).view(torch.uint8).reshape(len(blocks), -1).numpy()
        assert all(np.array_equal(row, block_bytes(k)) for k, row in zip(keys, data))
        restored += len(blocks)
        pool.free(blocks)
        tier.close()
    assert restored > 0 and pool.is_empty()
