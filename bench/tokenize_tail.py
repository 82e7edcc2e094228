"""Tail latency of incremental tokenization at long contexts, on a host whose cores are busy.

One conversation of `--context` characters of agent-trace text is resent `--calls` times,
each call appending `--append` characters (the median agent append), with a pause between
calls as a server has between requests. Each call's wall time through
IncrementalTokenizer.encode is recorded; p50/p99/max are printed for the two-thread proof
(csrc/scan_helper.h) and, as the peer in the same run, the calling thread alone
(ZLLM_SCAN_THREADS=1, a subprocess), each idle and with `--load` processes spinning on every
core at normal priority (what a concurrent build does to the host).

    PYTHONPATH=$PWD python bench/tokenize_tail.py [--context 1000000] [--calls 400] [--load 2]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

from trace_replay import agent_trace, trace_text  # bench/ is on sys.path when run as a script


def measure(context: int, append: int, calls: int, pause: float) -> list[float]:
    """Milliseconds per encode call of a conversation growing by `append` characters a call."""
    from zllm_core.model.model_names import resolve_model
    from zllm_core.tokenizer import Tokenizer
    from zllm_core.tokenizer.incremental import IncrementalTokenizer

    tok = IncrementalTokenizer(Tokenizer.from_pretrained(resolve_model("zllm-demo")), shadow_rate=0.0)
    text = trace_text(agent_trace(), context + append * (calls + 1))
    tok.encode(text[:context], key="c")
    times = []
    for k in range(1, calls + 1):
        prompt = text[:context + k * append]
        start = time.perf_counter()
        tok.encode(prompt, key="c")
        times.append((time.perf_counter() - start) * 1e3)
        time.sleep(pause)
    return times


def _spin(stop) -> None:
    while not stop.is_set():
        pass


def run_mode(one_thread: bool, args) -> list[float]:
    env = {**os.environ, "ZLLM_SCAN_THREADS": "1" if one_thread else "0"}
    out = subprocess.run([sys.executable, __file__, "--child", "--context", str(args.context), "--append",
                          str(args.append), "--calls", str(args.calls), "--pause", str(args.pause)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=1_000_000)
    ap.add_argument("--append", type=int, default=1400)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--pause", type=float, default=0.005, help="seconds between calls")
    ap.add_argument("--load", type=int, default=os.cpu_count(), help="spinning processes while loaded")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.context, args.append, args.calls, args.pause)))
        return
    rows = []
    for loaded in (False, True):
        stop = multiprocessing.Event()
        spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(args.load if loaded else 0)]
        for p in spinners:
            p.start()
        try:
            for one_thread in (True, False):
                rows.append((loaded, one_thread, run_mode(one_thread, args)))
        finally:
            stop.set()
            for p in spinners:
                p.join()
    print(f"context {args.context:,} chars, +{args.append} a call, {args.calls} calls, "
          f"{args.pause * 1e3:.0f} ms apart; load: {args.load} spinning processes")
    print(f"{'host':<8} {'proof':<12} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99 vs one thread':>18}")
    peer = {}
    for loaded, one_thread, times in rows:
        q = statistics.quantiles(times, n=100)
        p50, p90, p99 = q[49], q[89], q[98]
        if one_thread:
            peer[loaded] = p99
        ratio = "" if one_thread else f"{p99 / peer[loaded]:.2f}x"
        print(f"{'busy' if loaded else 'idle':<8} {'one thread' if one_thread else 'two threads':<12} "
              f"{p50:8.3f} {p90:8.3f} {p99:8.3f} {max(times):8.3f} {ratio:>18}")


if __name__ == "__main__":
    main()
