"""Token bitmask apply (issue 18): every backend against the torch reference, in the same run.

Logits are Qwen's head (151936 rows for 151669 tokens), fp32.  Three masks: "random" (each
token a coin flip, so no word is all-allowed or all-disallowed: the native loops' worst
case), "sparse" (1% allowed, a grammar fence mid-structure) and "dense" (99% allowed,
inside a free-text string).  The ratio is torch's time over the backend's.

    python bench/token_bitmask.py               # CUDA: torch, triton, cuda; CPU: torch, cpp
    python bench/token_bitmask.py --out table.md
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zllm_core.fence import bitmask as bm  # noqa: E402

from cuda_timing import cuda_seconds  # noqa: E402  (bench/ is on sys.path when run as a script)

HEAD_VOCAB, VOCAB = 151936, 151669
MASKS = {"random": 0.5, "sparse": 0.01, "dense": 0.99}  # share of tokens allowed


def timed(fn, device: torch.device, reps: int) -> float:
    """Seconds per call: the median of single calls on the CPU (robust to a busy host), the
    mean over ``reps`` back-to-back launches on a GPU; after one warm-up call."""
    fn()
    if device.type != "cuda":
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    return cuda_seconds(fn, reps)


def backends(device: torch.device) -> list[str]:
    if device.type == "cuda":
        return ["triton"] + (["cuda"] if bm.default_backend(device) == "cuda" else [])
    return ["cpp"] if bm.default_backend(device) == "cpp" else []


def bench(device: torch.device, batches: list[int], reps: int) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for batch in batches:
        logits = torch.randn(batch, HEAD_VOCAB, device=device)
        for kind, share in MASKS.items():
            bitmask = torch.from_numpy(bm.pack_allowed(rng.random((batch, VOCAB)) < share)).to(device)
            row = {"batch": batch, "mask": kind}
            row["torch"] = timed(lambda: bm.apply_token_bitmask_(logits, bitmask, vocab_size=VOCAB,
                                                                 backend="torch"), device, reps)
            for name in backends(device):
                row[name] = timed(lambda: bm.apply_token_bitmask_(logits, bitmask, vocab_size=VOCAB,
                                                                  backend=name), device, reps)
            rows.append(row)
            print(format_row(row, backends(device)), flush=True)
    return rows


def format_row(row: dict, names: list[str]) -> str:
    cells = [str(row["batch"]), row["mask"], f"{row['torch'] * 1e6:.0f}"]
    for name in names:
        cells += [f"{row[name] * 1e6:.0f}", f"{row['torch'] / row[name]:.1f}x"]
    return "| " + " | ".join(cells) + " |"


def table(rows: list[dict], names: list[str]) -> str:
    header = ["batch", "mask", "torch µs"] + [c for n in names for c in (f"{n} µs", f"torch/{n}")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + [format_row(r, names) for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batches = [1, 16, 64, 256] if device.type == "cuda" else [1, 16, 64]
    print(f"device {device}, torch threads {torch.get_num_threads()}, fp32 logits "
          f"[batch, {HEAD_VOCAB}], vocab {VOCAB}")
    names = backends(device)
    text = table(bench(device, batches, args.reps), names)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
