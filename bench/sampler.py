"""Sampling a token per row at temperature 1.0: zllm_core's two-level inverse CDF against
torch.multinomial and a one-level float64 inverse CDF (a softmax, a float64 cumsum over the
vocabulary, a searchsorted), same run, same logits, CPU time per call on one torch thread.

    PYTHONPATH=$PWD python bench/sampler.py [--vocab 151669] [--rows 1 16 64 256]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zllm_core.engine.sampler import _inverse_cdf  # noqa: E402


def one_level(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cdf = x.softmax(dim=-1).double().cumsum(dim=-1)
    return torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)


def multinomial(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return torch.multinomial(x.softmax(dim=-1), 1).squeeze(1)


def cpu_ms(fn, x: torch.Tensor, u: torch.Tensor, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        copy = x.clone()  # every method may consume its input; the copy is outside the clock
        start = time.process_time()
        fn(copy, u)
        best = min(best, time.process_time() - start)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=151669)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    methods = {"zllm_core": _inverse_cdf, "one-level f64": one_level, "multinomial": multinomial}
    print(f"vocab {args.vocab}, best of {args.repeats}, CPU ms per call (1 torch thread)")
    print(f"{'rows':>6} " + " ".join(f"{m:>14}" for m in methods) + "   one-level/ours  multinomial/ours")
    for rows in args.rows:
        x = torch.randn(rows, args.vocab) * 3
        u = torch.rand(rows, dtype=torch.float64)
        ms = {name: cpu_ms(fn, x, u, args.repeats) for name, fn in methods.items()}
        ours = ms["zllm_core"]
        print(f"{rows:>6} " + " ".join(f"{v:14.2f}" for v in ms.values())
              + f"   {ms['one-level f64'] / ours:13.2f}x {ms['multinomial'] / ours:16.2f}x")


if __name__ == "__main__":
    main()
