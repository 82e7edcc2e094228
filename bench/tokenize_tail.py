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

A third row times the same calls on the path a server takes for a continuing conversation
(server/prompt.py): the prompt a rope over the previous one (zllm_core/rope.py), given to
ConversationTokenizer.encode with that previous prompt as the proof's identity, so only the
appended text is tokenized (the row says what a request pays; the other two what a tokenizer
call on a fresh string pays).

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


def measure(context: int, append: int, calls: int, pause: float, rope: bool) -> list[tuple[float, float, bool]]:
    """(wall ms, the calling thread's CPU ms, preempted) per encode call of a conversation
    growing by `append` characters a call; `rope`: on the server's path."""
    from zllm_core.model.model_names import resolve_model
    from zllm_core.rope import Rope
    from zllm_core.tokenizer.conversation import ConversationTokenizer
    from zllm_core.tokenizer import Tokenizer
    from zllm_core.tokenizer.incremental import IncrementalTokenizer

    tok = IncrementalTokenizer(Tokenizer.from_pretrained(resolve_model("zllm-demo")), shadow_rate=0.0)
    text = trace_text(agent_trace(), context + append * (calls + 1))
    conversation = ConversationTokenizer(tok) if rope else None
    prompt = text[:context]
    tok.encode(prompt, key="c") if conversation is None else conversation.encode(prompt, key="c")
    calls_seen = []
    for k in range(1, calls + 1):
        previous, piece = prompt, text[context + (k - 1) * append:context + k * append]
        prompt = Rope(previous, piece) if rope else text[:context + k * append]
        switches, cpu, start = _preemptions(), time.thread_time(), time.perf_counter()
        if conversation is None:
            tok.encode(prompt, key="c")
        else:
            conversation.encode(prompt, key="c", prefix=previous)
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


MODES = {"one thread": ("1", False), "two threads": ("0", False), "server path": ("0", True)}


def run_mode(mode: str, args) -> list[tuple[float, float, bool]]:
    threads, rope = MODES[mode]
    env = {**os.environ, "ZLLM_SCAN_THREADS": threads}
    out = subprocess.run([sys.executable, __file__, "--child", "--context", str(args.context), "--append",
                          str(args.append), "--calls", str(args.calls), "--pause", str(args.pause),
                          *(["--rope"] if rope else [])],
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
    ap.add_argument("--rope", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.context, args.append, args.calls, args.pause, args.rope)))
        return
    rows = []
    for loaded in (False, True):
        stop = multiprocessing.RawValue("b", 0)
        spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(args.load if loaded else 0)]
        for p in spinners:
            p.start()
        try:
            for mode in MODES:
                rows.append((loaded, mode, run_mode(mode, args)))
        finally:
            stop.value = 1
            for p in spinners:
                p.join()
    print(f"context {args.context:,} chars, +{args.append} a call, {args.calls} calls, "
          f"{args.pause * 1e3:.0f} ms apart; load: {args.load} spinning processes")
    print(f"{'host':<8} {'path':<12} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99 vs one thread':>18}"
          f" {'cpu p50 ms':>10} {'cpu p99 ms':>10} {'over 1 ms':>9} {'preempted':>9}")
    peer = {}
    for loaded, mode, calls in rows:
        times = [wall for wall, _, _ in calls]
        q = statistics.quantiles(times, n=100)
        p50, p90, p99 = q[49], q[89], q[98]
        cpu = statistics.quantiles([c for _, c, _ in calls], n=100)
        if mode == "one thread":
            peer[loaded] = p99
        ratio = "" if mode == "one thread" else f"{p99 / peer[loaded]:.2f}x"
        print(f"{'busy' if loaded else 'idle':<8} {mode:<12} "
              f"{p50:8.3f} {p90:8.3f} {p99:8.3f} {max(times):8.3f} {ratio:>18} {cpu[49]:10.3f} {cpu[98]:10.3f} "
              f"{sum(t > 1.0 for t in times):9d} {sum(p for _, _, p in calls):9d}")


if __name__ == "__main__":
    main()
