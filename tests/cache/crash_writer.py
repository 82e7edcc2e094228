"""A snapshot writer process for the kill -9 test: commits blobs of blocks whose bytes are a
function of their key, under a budget small enough that old blobs are dropped as it goes.

    python tests/cache/crash_writer.py DIR

Prints "ready" once the store is open, then writes until it is killed.
"""
import os
import sys

import numpy as np

from zllm_core.cache.snapshot_format import BlobLayout
from zllm_core.cache.snapshot_store import SessionRecord, SnapshotStore

LAYOUT = BlobLayout(num_layers=2, num_kv_heads=1, head_dim=8, block_size=4, dtype="float32")
SCOPE = b"s" * 32
BUDGET = 2 << 20


def block_bytes(key: bytes) -> np.ndarray:
    """What a block named ``key`` must hold: restoring anything else is a corrupt restore."""
    rng = np.random.default_rng(int.from_bytes(key[:8], "little"))
    return rng.integers(0, 256, LAYOUT.bytes_per_block, dtype=np.uint8)


def main(directory: str) -> None:
    store = SnapshotStore(directory, LAYOUT, BUDGET)
    print("ready", flush=True)
    rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
    while True:
        keys = [os.urandom(32) for _ in range(int(rng.integers(16, 256)))]
        store.commit(SCOPE, keys, np.stack([block_bytes(k) for k in keys]))
        store.put_session(SessionRecord(SCOPE, "conv", np.arange(len(keys) * 4, dtype=np.int32), tuple(keys)))


if __name__ == "__main__":
    main(sys.argv[1])
