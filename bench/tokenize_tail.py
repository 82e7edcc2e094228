"""Tail latency of incremental tokenization at long contexts, on a host whose cores are busy.

One conversation of `--context` characters of agent-trace text is resent `--calls` times,
each call appending `--append` characters (the median agent append), with a pause between
calls as a server has between requests. Each call's wall time through
IncrementalTokenizer.encode is recorded; p50/p99/max are printed for the two-thread proof
(csrc/scan_helper.h) and, as the peer in the same run, the calling thread alone
(ZLLM_SCAN_THREADS=1, a subprocess), each idle and with `--load` processes spinning on every
core at normal priority (what a concurrent build does to the host). Beside the wall times: the
calling thread's own CPU time per call and how many calls it spent partly preempted (an
involuntary context switch during the call), so a tail reads as work or as time off the CPU.

The spinners read a flag in shared memory and nothing else. They once polled a
multiprocessing.Event, whose is_set takes a lock the spinners share: each slept and was woken
~14,000 times a second, and those wake-ups preempted the measured call up to 51 times in one
call (0.11 ms of its own CPU in 2.3 ms), a load no build makes.

    PYTHONPATH=$PWD python bench/tokenize_tail.py [--context 1000000] [--calls 400] [--load 2]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import time

from trace_replay import agent_trace, trace_text  # bench/ is on sys.path when run as a script


def measure(context: int, append: int, calls: int, pause: float) -> list[tuple[float, float, bool]]:
    """(wall ms, the calling thread's CPU ms, preempted) per encode call of a conversation
    growing by `append` characters a call."""
    from zllm_core.model.model_names import resolve_model
    from zllm_core.tokenizer import Tokenizer
    from zllm_core.tokenizer.incremental import IncrementalTokenizer

    tok = IncrementalTokenizer(Tokenizer.from_pretrained(resolve_model("zllm-demo")), shadow_rate=0.0)
    text = trace_text(agent_trace(), context + append * (calls + 1))
    tok.encode(text[:context], key="c")
    calls_seen = []
    for k in range(1, calls + 1):
        prompt = text[:context + k * append]
        switches, cpu, start = _preemptions(), time.thread_time(), time.perf_counter()
        tok.encode(prompt, key="c")
        wall = time.perf_counter() - start
        calls_seen.append((wall * 1e3, (time.thread_time() - cpu) * 1e3, _preemptions() > switches))
        time.sleep(pause)
    return calls_seen


def _preemptions() -> int:
    """Involuntary context switches of the calling thread so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


def _spin(stop) -> None:
    while not stop.value:
        pass


def run_mode(one_thread: bool, args) -> list[tuple[float, float, bool]]:
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
        stop = multiprocessing.RawValue("b", 0)
        spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(args.load if loaded else 0)]
        for p in spinners:
            p.start()
        try:
            for one_thread in (True, False):
                rows.append((loaded, one_thread, run_mode(one_thread, args)))
        finally:
            stop.value = 1
            for p in spinners:
                p.join()
    print(f"context {args.context:,} chars, +{args.append} a call, {args.calls} calls, "
          f"{args.pause * 1e3:.0f} ms apart; load: {args.load} spinning processes")
    print(f"{'host':<8} {'proof':<12} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99 vs one thread':>18}"
          f" {'cpu p50 ms':>10} {'cpu p99 ms':>10} {'over 1 ms':>9} {'preempted':>9}")
    peer = {}
    for loaded, one_thread, calls in rows:
        times = [wall for wall, _, _ in calls]
        q = statistics.quantiles(times, n=100)
        p50, p90, p99 = q[49], q[89], q[98]
        cpu = statistics.quantiles([c for _, c, _ in calls], n=100)
        if one_thread:
            peer[loaded] = p99
        ratio = "" if one_thread else f"{p99 / peer[loaded]:.2f}x"
        print(f"{'busy' if loaded else 'idle':<8} {'one thread' if one_thread else 'two threads':<12} "
              f"{p50:8.3f} {p90:8.3f} {p99:8.3f} {max(times):8.3f} {ratio:>18} {cpu[49]:10.3f} {cpu[98]:10.3f} "
              f"{sum(t > 1.0 for t in times):9d} {sum(p for _, _, p in calls):9d}")


if __name__ == "__main__":
    main()
