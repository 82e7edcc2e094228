"""Per-step CPU overhead of a decode round at 64 sequences x 32K tokens of context (issue 20).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python bench/step_overhead.py [--seqs 64] [--context 32768] [--steps 512]

The real bookkeeping objects an engine step uses, with the model NOT run: a `KVCacheManager`
over a `BlockPool` of seqs x context / 16 blocks plus headroom, with the prefix cache on (as
served), a `Scheduler` and the runner's `InputBuffers`.  The sequences' prompts are first
"computed" by scheduling and updating their prefill chunks without a model (a sampled token
appended when a chunk samples); then each timed decode step is, in CPU time:

* schedule: `Scheduler.schedule()` (one decode chunk per sequence, a new block every 16 tokens);
* inputs: `InputBuffers.prepare(batch)` (block-table rows synced incrementally, vectorised
  positions and slots, the sampled rows);
* update: `Scheduler.update(batch)` (num_computed, full blocks committed to the prefix cache)
  and one token appended to each sequence, as `LLMEngine.step` does after sampling.

The peer, in the same run, alternating every 16 steps on the same sequences: the same
schedule and update, with inputs built by the pre-#20 code, `build_metadata` and the old
runner's sampled rows, copied below from 0ac90b4 (slots in a Python loop token by token,
block tables padded list -> array every step).  The old scheduler's decode round (sort the
decoding sequences, grow each table, one chunk each) did the same work as the new one's, so
schedule and update are the new code in both columns; the difference is the inputs.

Two cache states, each a row per path: "warm", steps back to back; "cold", --flush-mb of
memory written between steps (untimed), as a model forward evicts the caches.

Context lengths are staggered (context - i for sequence i) so that block boundaries, where a
table grows and a block is committed, fall on different steps, as under real load.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np
import torch

from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.kv_cache_manager import KVCacheManager
from zllm_core.cache.prefix_cache import CacheRequest, PrefixCache
from zllm_core.cache.scope import Scope
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.scheduler import Batch, Scheduler, SchedulerConfig
from zllm_core.engine.sequence import Sequence
from zllm_core.engine.step_inputs import InputBuffers
from zllm_core.model.attention_backend import AttentionMetadata

BLOCK = 16
TOKEN = 7  # the "sampled" token


# -- the pre-#20 peer: zllm_core/engine/model_runner.py at 0ac90b4, kept here as the baseline --

def build_metadata(batch: Batch, block_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
    """Token ids, positions and attention metadata for the chunks of one step."""
    ids: list[np.ndarray] = []
    positions: list[int] = []
    slots: list[int] = []
    starts = [0]
    seq_lens: list[int] = []
    for c in batch.chunks:
        table = c.seq.block_table
        pos = range(c.start, c.start + c.length)
        ids.append(c.seq.token_ids[c.start:c.start + c.length])
        positions += pos
        slots += [table[p // block_size] * block_size + p % block_size for p in pos]
        starts.append(starts[-1] + c.length)
        seq_lens.append(c.start + c.length)
    width = max(len(c.seq.block_table) for c in batch.chunks)
    # Filled row by row in numpy: a 300K-token context's table is 18K ids at every step.
    tables = np.zeros((len(batch.chunks), width), dtype=np.int32)  # padded with block 0
    for row, c in zip(tables, batch.chunks):
        row[:len(c.seq.block_table)] = c.seq.block_table
    meta = AttentionMetadata(
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=torch.from_numpy(tables).to(device),
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        max_query_len=max(c.length for c in batch.chunks),
        max_seq_len=max(seq_lens),
    )
    return (torch.from_numpy(np.concatenate(ids)).to(device=device, dtype=torch.long),
            torch.tensor(positions, dtype=torch.long, device=device), meta)


def old_inputs(batch: Batch, device: torch.device):
    """What the old ModelRunner.run built before the model: the metadata and the sampled rows."""
    input_ids, positions, meta = build_metadata(batch, BLOCK, device)
    ends = meta.query_start_loc[1:].long() - 1
    sampling = torch.tensor([c.samples for c in batch.chunks], device=device)
    return input_ids, positions, meta, ends[sampling]

# -- end of the pre-#20 peer ------------------------------------------------------------------


def setup(num_seqs: int, context: int, headroom: int, steps: int):
    """A scheduler whose sequences have their prompts computed and one token sampled each."""
    num_blocks = num_seqs * context // BLOCK + headroom
    pool = BlockPool(num_blocks, BLOCK)
    kv = KVCacheManager(pool, PrefixCache(pool, "sha256"))
    # Prefill with one big budget (the model is not run, so chunking buys nothing here);
    # decode steps then run under the served default.
    sched = Scheduler(kv, SchedulerConfig(num_seqs, num_seqs * context))
    scope = Scope("bench-step-overhead").digest()
    rng = np.random.default_rng(0)
    params = SamplingParams(max_tokens=4 * steps + 16, temperature=0.0, ignore_eos=True)
    for i in range(num_seqs):
        prompt = rng.integers(1000, 150000, context - i, dtype=np.uint32)
        seq = Sequence(f"s{i}", prompt, params, i)
        seq.cache = CacheRequest(scope)
        sched.add(seq)
    while any(s.num_uncomputed > 1 for s in sched.running) or sched.waiting:
        batch = sched.schedule()
        sched.update(batch)
        for c in batch.chunks:
            if c.samples:
                c.seq.append(TOKEN)
    sched.config = SchedulerConfig(num_seqs, 2048)
    max_blocks = -(-(context + 4 * steps + 16) // BLOCK)
    buffers = InputBuffers(num_seqs, max_blocks, 2048, BLOCK, torch.device("cpu"))
    return sched, buffers


def step(sched: Scheduler, build) -> tuple[float, float, float]:
    """One decode round; CPU ms of schedule, inputs and update (+ appends)."""
    t0 = time.process_time_ns()
    batch = sched.schedule()
    t1 = time.process_time_ns()
    build(batch)
    t2 = time.process_time_ns()
    sched.update(batch)
    for c in batch.chunks:
        c.seq.append(TOKEN)
    t3 = time.process_time_ns()
    return (t1 - t0) / 1e6, (t2 - t1) / 1e6, (t3 - t2) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--steps", type=int, default=512, help="timed decode steps per path and cache state")
    ap.add_argument("--block", type=int, default=16, help="the paths alternate every this many steps")
    ap.add_argument("--warmup", type=int, default=32, help="untimed steps per path first")
    ap.add_argument("--flush-mb", type=int, default=64, help="cold rows: MB written between steps (untimed)")
    ap.add_argument("--profile", action="store_true", help="cProfile the new path's steps after")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    total = 4 * args.steps + 2 * args.warmup + (args.steps if args.profile else 0) + 1

    t = time.perf_counter()
    sched, buffers = setup(args.seqs, args.context, args.seqs * (total // BLOCK + 2) + 256, total)
    print(f"setup (prefill bookkeeping of {args.seqs} x {args.context:,} tokens): {time.perf_counter() - t:.1f} s")
    # The first prepare mirrors every table whole (2K entries per sequence); later ones copy
    # only blocks added since.  Timed alone, then untimed warm-up steps for both paths.
    first = step(sched, buffers.prepare)
    print(f"first new-path step (whole tables synced): schedule {first[0]:.2f} ms, inputs {first[1]:.2f} ms, "
          f"update {first[2]:.2f} ms")
    paths = {"new": buffers.prepare, "old": lambda b: old_inputs(b, cpu)}
    for _ in range(args.warmup):
        for build in paths.values():
            step(sched, build)
    # warm: steps back to back (caches hold the tables and sequences); cold: between steps,
    # untimed, --flush-mb of memory is written, as a model forward evicts the caches.
    flush = np.zeros(args.flush_mb << 20, dtype=np.uint8)
    times = {(cache, name): [] for cache in ("warm", "cold") for name in paths}
    for cache in ("warm", "cold"):
        for _ in range(args.steps // args.block):
            for name, build in paths.items():
                for _ in range(args.block):
                    if cache == "cold":
                        flush += 1
                    times[cache, name].append(step(sched, build))

    ctx = min(s.num_tokens for s in sched.running), max(s.num_tokens for s in sched.running)
    print(f"{args.seqs} sequences, context {ctx[0]:,}-{ctx[1]:,} tokens at the end, {args.steps} timed decode steps "
          f"per row (paths alternating every {args.block}), CPU ms per step, prefix cache on, torch threads 1")
    print(f"{'caches':>6} {'path':>5} {'schedule p50':>13} {'inputs p50':>11} {'update p50':>11} {'total p50':>10} "
          f"{'total mean':>11} {'total p99':>10}")
    totals = {}
    for (cache, name), rows in times.items():
        total_ms = [sum(r) for r in rows]
        totals[cache, name] = statistics.median(total_ms), statistics.fmean(total_ms)
        med = [statistics.median(r[k] for r in rows) for k in range(3)]
        print(f"{cache:>6} {name:>5} {med[0]:>13.3f} {med[1]:>11.3f} {med[2]:>11.3f} {totals[cache, name][0]:>10.3f} "
              f"{totals[cache, name][1]:>11.3f} {np.percentile(total_ms, 99):>10.3f}")
    for cache in ("warm", "cold"):
        old, new = totals[cache, "old"], totals[cache, "new"]
        print(f"{cache} old / new: p50 {old[0] / new[0]:.2f}x, mean {old[1] / new[1]:.2f}x")

    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            step(sched, buffers.prepare)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
