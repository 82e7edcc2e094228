"""Prefix cache, SSD tier, on the embedded model, in one run:

    python bench/ssd_cache.py [--prefixes 4096 16384 32768 131072] [--dir DIR]

Time to first token of a 32-token suffix after a prefix held three ways: on the device
(a hit), on disk only (the device copy evicted and backed up: an SSD restore), and nowhere
(a full prefill). The page cache is dropped for the snapshot files before each restore
(posix_fadvise DONTNEED on fsynced, clean pages), so the restore reads the disk; beside it,
the disk's sequential read time for the same bytes, measured the same way. "restore s" is the
restore alone (read, verify, copy into the pool); "ssd s" adds the suffix's prefill. The full
prefill runs once; hits, restores and disk reads are medians of --trials. A prefix past the
model's trained context (zllm-demo's is 40,960 positions) runs with ``allow_long_context``, as
``zllm serve --allow-long-context`` does: RoPE has no hard limit, and the demo's random weights
make the same work at any position, so its times are real; the row is marked.
"""
from __future__ import annotations

import argparse
import logging
import os
import random
import tempfile
import time
from pathlib import Path
from statistics import median

import torch

from zllm_core.cache.scope import CacheHint, Scope
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.model.model_names import resolve_model
from zllm_core.model.loader import load_model

from prefix_cache import ttft  # bench/ is on sys.path when run as a script

SUFFIX = 32
READ_CHUNK = 16 << 20


def drop_page_cache(directory: Path) -> None:
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def sequential_read_seconds(directory: Path) -> tuple[float, int]:
    """Read every snapshot file front to back in large reads, from the disk."""
    drop_page_cache(directory)
    buf = bytearray(READ_CHUNK)
    total = 0
    start = time.perf_counter()
    for path in sorted(directory.iterdir()):
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return time.perf_counter() - start, total


def bench_prefix(model: torch.nn.Module, n: int, root: Path, rng: random.Random, trials: int) -> str:
    long = n + SUFFIX + 8 > model.config.max_position_embeddings
    block_bytes = 2 * model.config.num_layers * model.config.num_kv_heads * model.config.head_dim * 4 * 16
    blocks = -(-(n + SUFFIX) // 16)
    directory = root / f"ssd-{n}"
    config = EngineConfig(kv_cache_bytes=(2 * blocks + 16) * block_bytes, max_model_len=n + SUFFIX + 8,
                          ssd_cache_dir=str(directory), allow_long_context=True)
    engine = LLMEngine(model, None, config, Scope("bench-ssd"))
    for k, v in engine.kv.pool.kv_caches:  # fault the pool's pages in, as a server that has run a while has
        k.fill_(0)
        v.fill_(0)
    prefix = [rng.randrange(1000, 150000) for _ in range(n)]
    suffix = lambda: [rng.randrange(1000, 150000) for _ in range(SUFFIX)]  # noqa: E731
    prefill, _ = ttft(engine, prefix + suffix(), f"cold{n}", CacheHint())
    device = median(ttft(engine, prefix + suffix(), f"hit{n}.{t}", CacheHint())[0] for t in range(trials))
    ssd, restore_only = [], []
    for t in range(trials):
        engine.kv.cache.evict(engine.kv.pool.num_blocks)  # backed up (the first time), then freed
        engine.kv.cache.ssd.writer.flush()
        drop_page_cache(directory / "blobs")
        before = engine.kv.cache.ssd.stats.restore_seconds
        seconds, cached = ttft(engine, prefix + suffix(), f"ssd{n}.{t}", CacheHint())
        assert cached == n and engine.kv.cache.stats.lookups["ssd_longest_prefix"] == t + 1
        ssd.append(seconds)
        restore_only.append(engine.kv.cache.ssd.stats.restore_seconds - before)
    read_bytes = engine.kv.cache.ssd.stats.bytes_read // trials
    disk, on_disk = zip(*(sequential_read_seconds(directory / "blobs") for _ in range(trials)))
    disk_same = median(disk) * read_bytes / on_disk[0]
    engine.close()
    restore, restore_only = median(ssd), median(restore_only)
    return (f"{n:>7} {prefill:>10.3f} {device:>9.4f} {restore:>9.4f} {restore_only:>9.4f} "
            f"{read_bytes / 2**20:>8.0f} {disk_same:>9.4f} {prefill / restore:>10.1f}x "
            f"{restore_only / disk_same:>10.2f}x" + ("  (past the trained context)" if long else ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefixes", type=int, nargs="+", default=[4096, 16384, 32768, 131072])
    ap.add_argument("--trials", type=int, default=5, help="device hits, restores and disk reads (medians)")
    ap.add_argument("--dir", default=None, help="where the snapshots go (default: a temp dir on /tmp's disk)")
    args = ap.parse_args()
    logging.getLogger("zllm.cache").setLevel(logging.ERROR)  # random prompts are all near-misses
    model = load_model(resolve_model("zllm-demo"))
    print(f"zllm-demo on {torch.get_num_threads()} torch threads; TTFT of a {SUFFIX}-token suffix")
    print(f"{'prefix':>7} {'prefill s':>10} {'device s':>9} {'ssd s':>9} {'restore s':>9} "
          f"{'MiB read':>8} {'disk s':>9} {'prefill/ssd':>11} {'restore/disk':>11}")
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        for n in args.prefixes:
            print(bench_prefix(model, n, Path(root), rng, args.trials), flush=True)


if __name__ == "__main__":
    main()
