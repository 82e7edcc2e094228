"""The native CPU prefill kernel against the torch reference prefill, in the same run.

    PYTHONPATH=. python bench/cpu_prefill.py [--threads 1] [--repeats 9]

Chunks of query tokens over cached context (zllm-demo's attention shape: 4 query heads, 2 KV
heads, head_dim 64; blocks in random order, as a pool hands them out after churn), each timed
through ``cpu_paged_prefill`` (reads the blocks in place) and ``TorchAttention.prefill``
(gathers them, then SDPA), in process time, median of --repeats.  A ratio above 1 means the
kernel is faster.  "rows x keys" counts query rows (tokens x heads) times the keys each sees.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kernels"))
from paged_case import make_case  # noqa: E402

from zllm_core.model.cpu_attention import cpu_paged_prefill  # noqa: E402
from zllm_core.model.torch_attention import TorchAttention  # noqa: E402

# name: (context lengths, chunk lengths), one sequence each
CASES = {
    "8 @ 16K": ([16000], [8]),
    "8 decodes + 8 @ 16K": ([64] * 8 + [16000], [1] * 8 + [8]),
    "16 @ 16K": ([16000], [16]),
    "24 @ 16K": ([16000], [24]),
    "120 @ 8K": ([8192], [120]),
    "256 new": ([256], [256]),
    "16 x 256 new": ([256] * 16, [256] * 16),
    "2040 @ 8K": ([8192], [2040]),
}


def cpu_ms(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    reference = TorchAttention()
    print(f"torch threads {args.threads}, CPU ms, median of {args.repeats}")
    print("| chunks (query tokens @ keys) | rows x keys | kernel ms | torch reference ms | reference / kernel |")
    print("|---|---:|---:|---:|---:|")
    for name, (seq_lens, query_lens) in CASES.items():
        c = make_case(seq_lens, query_lens, 4, 2, 64, 16, torch.float32, seed=1, device="cpu")
        m = c.meta
        repeats = max(3, args.repeats // 3) if max(query_lens) > 1024 else args.repeats
        kernel = cpu_ms(lambda: cpu_paged_prefill(c.q, c.k_cache, c.v_cache, m.block_tables, m.seq_lens,
                                                  m.query_start_loc, c.scale), repeats)
        torch_ms = cpu_ms(lambda: reference.prefill(c.q, c.k_cache, c.v_cache, m, c.scale), repeats)
        row_keys = sum(4 * q * (s - (q - 1) / 2) for s, q in zip(seq_lens, query_lens))
        print(f"| {name} | {row_keys / 1e6:.2f}M | {kernel:.2f} | {torch_ms:.2f} | {torch_ms / kernel:.2f}x |",
              flush=True)


if __name__ == "__main__":
    main()
