"""Tail latency of incremental tokenization at long contexts, on a host whose cores are busy.

Conversations of `--context` characters of agent-trace text are resent `--turns` times each,
`--calls` calls in all, each call appending `--append` characters (the median agent append),
with a pause between calls as a server has between requests. Each conversation begins again at
`--context` in a scope of its own (its cold first call not timed), so every call is at
1.00-1.06M characters, and one call in `--turns` is a conversation's first resend. (One
conversation resent 400 times grew to 1.56M characters, and its last calls, 50% longer, set
the tail.) Each call's wall time through IncrementalTokenizer.encode is recorded; p50/p99/max
are printed for the two-thread proof (csrc/scan_helper.h) and, as the peer in the same run,
the calling thread alone (ZLLM_SCAN_THREADS=1, a subprocess), each idle and with the host
loaded: `--load` processes spinning on every core at normal priority, or `--load-cmd` (a build,
`stress-ng --cpu 2`) run in its own session, as another user's job is. Beside the wall times:
the calling thread's own CPU time per call and how many calls it spent partly preempted (an
involuntary context switch during the call), so a tail reads as work or as time off the CPU.

Those rows take each fresh prompt string made before the pause, so that a call's burst on the
CPU is the call. CPython makes a 1.4M-character str slice in ~0.6 ms (it scans the 5 MB for its
widest character, then copies it): made in the same burst, it and the 0.45 ms call together
outlast the scheduler's base slice (~0.7 ms on EEVDF), and a loaded core then takes the CPU at
the next tick, 4 ms later at HZ=250, in the middle of the call. The row "two, made in burst"
measures that case beside the others.

The spinners read a flag in shared memory and nothing else. They once polled a
multiprocessing.Event, whose is_set takes a lock the spinners share: each slept and was woken
~14,000 times a second, and those wake-ups preempted the measured call up to 51 times in one
call (0.11 ms of its own CPU in 2.3 ms), a load no build makes.

The last row times the same calls on the path a server takes for a continuing conversation
(server/prompt.py): the prompt a rope over the previous one (zllm_core/rope.py), made in the
call's burst as a server makes it, given to ConversationTokenizer.encode with that previous
prompt as the proof's identity, so only the appended text is tokenized (the row says what a
request pays; the others what a tokenizer call on a fresh string pays).

    PYTHONPATH=$PWD python bench/tokenize_tail.py [--context 1000000] [--calls 400] [--turns 40]
        [--load 2 | --load-cmd "stress-ng --cpu 2"]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import resource
import signal
import statistics
import subprocess
import sys
import time

from trace_replay import agent_trace, trace_text  # bench/ is on sys.path when run as a script


def measure(context: int, append: int, calls: int, turns: int, pause: float, prompt_kind: str
            ) -> list[tuple[float, float, bool]]:
    """(wall ms, the calling thread's CPU ms, preempted) per encode call: conversations of
    `context` characters, each resent `turns` times growing by `append` characters a call.
    `prompt_kind`: "fresh" (a str slice made before the pause), "burst" (made right before
    the call) or "rope" (the server's path)."""
    from zllm_core.model.model_names import resolve_model
    from zllm_core.rope import Rope
    from zllm_core.tokenizer.conversation import ConversationTokenizer
    from zllm_core.tokenizer import Tokenizer
    from zllm_core.tokenizer.incremental import IncrementalTokenizer

    tok = IncrementalTokenizer(Tokenizer.from_pretrained(resolve_model("zllm-demo")), shadow_rate=0.0)
    text = trace_text(agent_trace(), context + append * (turns + 1))
    conversation = ConversationTokenizer(tok) if prompt_kind == "rope" else None

    def make(k: int, previous):
        if conversation is None:
            return text[:context + k * append]
        return Rope(previous, text[context + (k - 1) * append:context + k * append])

    def encode(prompt, scope: str, previous) -> None:
        if conversation is None:
            tok.encode(prompt, scope=scope, key="c")
        else:
            conversation.encode(prompt, scope=scope, key="c", prefix=previous)

    calls_seen = []
    for c in range(-(-calls // turns)):  # each conversation in a scope of its own, begun cold
        prompt = text[:context]
        encode(prompt, str(c), None)
        ready = make(1, prompt) if prompt_kind == "fresh" else None
        time.sleep(pause)
        for k in range(1, min(turns, calls - len(calls_seen)) + 1):
            previous = prompt
            prompt = ready if ready is not None else make(k, previous)
            switches, cpu, start = _preemptions(), time.thread_time(), time.perf_counter()
            encode(prompt, str(c), previous)
            wall = time.perf_counter() - start
            calls_seen.append((wall * 1e3, (time.thread_time() - cpu) * 1e3, _preemptions() > switches))
            ready = make(k + 1, prompt) if prompt_kind == "fresh" else None
            time.sleep(pause)
    return calls_seen


def _preemptions() -> int:
    """Involuntary context switches of the calling thread so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


def _spin(stop) -> None:
    while not stop.value:
        pass


@contextlib.contextmanager
def load(args):
    """The host loaded while the block runs: `args.load_cmd` in its own session, else
    `args.load` spinning processes."""
    if args.load_cmd:
        job = subprocess.Popen(args.load_cmd, shell=True, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield
        finally:
            os.killpg(job.pid, signal.SIGTERM)
            job.wait()
        return
    stop = multiprocessing.RawValue("b", 0)
    spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(args.load)]
    for p in spinners:
        p.start()
    try:
        yield
    finally:
        stop.value = 1
        for p in spinners:
            p.join()


# path: (ZLLM_SCAN_THREADS, prompt kind)
MODES = {"one thread": ("1", "fresh"), "two threads": ("0", "fresh"), "two, made in burst": ("0", "burst"),
         "server path": ("0", "rope")}


def run_mode(mode: str, args) -> list[tuple[float, float, bool]]:
    threads, prompt_kind = MODES[mode]
    env = {**os.environ, "ZLLM_SCAN_THREADS": threads}
    out = subprocess.run([sys.executable, __file__, "--child", "--context", str(args.context), "--append",
                          str(args.append), "--calls", str(args.calls), "--turns", str(args.turns),
                          "--pause", str(args.pause), "--prompt", prompt_kind],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=1_000_000)
    ap.add_argument("--append", type=int, default=1400)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--turns", type=int, default=40, help="calls per conversation (each begins at --context)")
    ap.add_argument("--pause", type=float, default=0.005, help="seconds between calls")
    ap.add_argument("--load", type=int, default=os.cpu_count(), help="spinning processes while loaded")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--load-cmd", help="a command loading the host instead of the spinners, in its own session")
    ap.add_argument("--prompt", default="fresh", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.context, args.append, args.calls, args.turns, args.pause, args.prompt)))
        return
    rows = []
    for loaded in (False, True):
        with (load(args) if loaded else contextlib.nullcontext()):
            for mode in MODES:
                rows.append((loaded, mode, run_mode(mode, args)))
    print(f"context {args.context:,} chars, +{args.append} a call, {args.calls} calls "
          f"({args.turns} a conversation, to {args.context + args.turns * args.append:,} chars), "
          f"{args.pause * 1e3:.0f} ms apart; load: {args.load_cmd or f'{args.load} spinning processes'}")
    print(f"{'host':<8} {'path':<18} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99 vs one thread':>18}"
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
        print(f"{'busy' if loaded else 'idle':<8} {mode:<18} "
              f"{p50:8.3f} {p90:8.3f} {p99:8.3f} {max(times):8.3f} {ratio:>18} {cpu[49]:10.3f} {cpu[98]:10.3f} "
              f"{sum(t > 1.0 for t in times):9d} {sum(p for _, _, p in calls):9d}")


if __name__ == "__main__":
    main()
