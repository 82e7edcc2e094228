"""Incremental tokenization against full re-tokenization, replaying agent traces.

Every call of every session is rendered through the demo model's chat template and encoded
by IncrementalTokenizer (one session per trace session, found by key), which is timed alone,
as a server runs it between requests. A second pass over the same rendered calls times full
re-tokenization with tiktoken (the reference library) and with gigatoken with its cache warm
(it encoded the previous call's text just before, the strongest cached baseline), and checks
every incremental result against zllm_core's full tokenization (which the tokenizer tests
check against tiktoken). Prints p50/p99 per call in bands of context size
with the ratios, the first-window acceptance rate, and the router measurement: time of one
incremental call against one full tokenization for appends of growing size.

    PYTHONPATH=$PWD python bench/tokenize_incremental.py [--trace PATH ...] [--sessions N]
        [--max-calls N] [--baseline-every K] [--pad CHARS] [--no-router] [--latency-only] [--nfc] [--keyless]
        [--one-thread]
Contexts over 1M characters: the generator restarts 1% of calls, so its sessions rarely pass
1M; --pad 1500000 starts every session with a 1.5M-character user message of trace text
(a session that begins by reading a large input) and replays its real appends on top.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import gigatoken
import numpy as np
import tiktoken

from zllm_core import _native
from zllm_core.dialects.chat_template import ChatTemplate
from zllm_core.model.model_names import resolve_model
from zllm_core.tokenizer import Tokenizer
from zllm_core.tokenizer.incremental import IncrementalTokenizer
from zllm_core.tokenizer.vocabulary import PACKAGE_VOCAB, load_family

from trace_replay import agent_trace, rendered_calls, trace_text  # bench/ is on sys.path when run as a script

NAN = float("nan")
BANDS = [(0, 100_000, "<100K"), (100_000, 1_000_000, "100K-1M"), (1_000_000, 10**12, ">1M")]


def tiktoken_of(tok: Tokenizer) -> tiktoken.Encoding:
    vocab = load_family(tok.name)
    ranks = {t: i for i, t in enumerate(vocab.tokens) if t}
    pattern = json.loads((PACKAGE_VOCAB / "families.json").read_text())[tok.name]["pat_str"]
    return tiktoken.Encoding(tok.name, pat_str=pattern, mergeable_ranks=ranks,
                             special_tokens=tok.special_tokens)


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def demo_tokenizer(nfc: bool) -> Tokenizer:
    """The demo model's tokenizer (Qwen2's ranks); nfc: with the NFC normalizer Qwen's own
    tokenizer.json declares."""
    tok = Tokenizer.from_pretrained(resolve_model("zllm-demo"))
    return Tokenizer(replace(load_family(tok.name), normalizer="NFC")) if nfc else tok


def replay(traces: list[Path], sessions: int, max_calls: int, every: int, pad: int,
           latency_only: bool = False, nfc: bool = False, keyless: bool = False) -> list[tuple]:
    """Rows (context chars, incr s, tiktoken s, giga warm s, prefix check s) per call; the
    prefix check is `str.startswith` of what the call shares with the previous one (the read
    any exact proof of the shared prefix makes, timed after the call). Two passes
    over the same rendered calls: the incremental tokenizer alone (what a server runs between
    requests), then the baselines, which also check every incremental result against a full
    encode. latency_only: the first pass only, checked on every 50th call. keyless: calls carry
    no session key, so each finds its session by the longest shared text prefix."""
    model_dir = resolve_model("zllm-demo")
    tok = demo_tokenizer(nfc)
    template = ChatTemplate.from_model_dir(model_dir)
    preamble = trace_text(traces[-1], pad) if pad else ""
    inc = IncrementalTokenizer(tok, budget_bytes=4 << 30, shadow_rate=0)
    timings, digests, checked, previous = [], [], 0, (None, "")
    for key, text in each_call(traces, template, sessions, max_calls, preamble):
        dt_inc, ids = timed(inc.encode, text, "bench", None if keyless else key)
        timings.append((len(text), dt_inc, prefix_check(text, *previous, key)))
        previous = (key, text)
        digests.append(hashlib.blake2b(ids.tobytes(), digest_size=16).digest())
        if latency_only and len(timings) % 50 == 0:
            checked += ids.tolist() == tok.encode(text, allowed_special="all")
        del ids  # a server's request lets its prompt go: the session then rewrites in place
    rows = [(n, inc_s, NAN, NAN, check_s) for n, inc_s, check_s in timings]
    if not latency_only:
        tik = tiktoken_of(tok)
        giga = gigatoken.Tokenizer.from_tiktoken(str(PACKAGE_VOCAB / f"{tok.name}.tiktoken"), pretokenizer=tok.name)
        for k, (_, text) in enumerate(each_call(traces, template, sessions, max_calls, preamble)):
            full = np.asarray(tok.encode(text, allowed_special="all"), dtype=np.uint32)
            checked += hashlib.blake2b(full.tobytes(), digest_size=16).digest() == digests[k]
            if (k + 1) % every == 0:
                dt_tik, _ = timed(tik.encode, text, allowed_special="all")
                dt_giga, _ = timed(giga.encode, text)  # warm: the previous call's text was encoded
                rows[k] = rows[k][:2] + (dt_tik, dt_giga) + rows[k][4:]
            giga.encode(text)  # keeps the next call's cache as warm as an agent's resend finds it
        rows = [r for k, r in enumerate(rows) if (k + 1) % every == 0]
    st = inc.stats
    expected = len(timings) // 50 if latency_only else len(timings)
    print(f"{len(timings)} calls, {checked} of {expected} checked identical to full tokenization; "
          f"{st.repairs} repairs, {st.cold} cold, {st.fallbacks} fallbacks, {st.disagreements} disagreements")
    print(f"first-window (512) acceptance {st.first_window_rate:.4%}; accepted by doubling {st.accepted_at}")
    if checked != expected:
        sys.exit("incremental ids differ from full tokenization")
    return rows


def prefix_check(text: str, previous_key: str | None, previous: str, key: str) -> float:
    """Seconds `str.startswith` takes to prove text extends what it shares with the previous
    call's text (NaN for a session's first call)."""
    if key != previous_key:
        return NAN
    shared = previous[:_native.SessionText(previous).common_prefix(text)]
    return timed(text.startswith, shared)[0]


def each_call(traces: list[Path], template: ChatTemplate, sessions: int, max_calls: int, preamble: str):
    """(session key, prompt text) per call, rendered afresh (a server renders, then tokenizes)."""
    for t, trace in enumerate(traces):
        for s, text in rendered_calls(trace, template, sessions, max_calls, preamble):
            yield f"{t}/{s}", text


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


def print_bands(rows: list[tuple]) -> None:
    """incr: the repair, returning a read-only array the session never changes."""
    print(f"\n{'context':>8} {'calls':>6} {'incr p50':>9} {'p99':>7} "
          f"{'tiktoken p50':>13} {'p99':>8} {'giga warm p50':>14} {'p99':>7} "
          f"{'x tiktoken':>11} {'x giga':>7}   (ms per call)")
    for lo, hi, name in BANDS:
        band = [r for r in rows if lo <= r[0] < hi]
        if not band:
            continue
        inc, tik, giga = ([r[k] * 1e3 for r in band] for k in (1, 2, 3))
        print(f"{name:>8} {len(band):>6} {pct(inc, 50):>9.3f} {pct(inc, 99):>7.2f} "
              f"{pct(tik, 50):>13.2f} {pct(tik, 99):>8.2f} {pct(giga, 50):>14.3f} {pct(giga, 99):>7.2f} "
              f"{pct(tik, 50) / pct(inc, 50):>10.0f}x {pct(giga, 50) / pct(inc, 50):>6.1f}x")
    print(f"\n{'context':>9} {'calls':>6} {'incr p50 ms':>12} {'giga p50 ms':>12} "
          f"{'startswith p50':>15} {'incr - startswith':>18}   (cost as the context grows)")
    for lo in (0, 100_000, 300_000, 600_000, 1_000_000, 2_000_000, 4_000_000):
        band = [r for r in rows if lo <= r[0] < max(2 * lo, 100_000)]
        if band:
            checked = [r for r in band if r[4] == r[4]]  # not a session's first call
            print(f"{lo:>9,} {len(band):>6} {pct([r[1] * 1e3 for r in band], 50):>12.3f} "
                  f"{pct([r[3] * 1e3 for r in band], 50):>12.3f} "
                  f"{pct([r[4] * 1e3 for r in checked], 50):>15.3f} "
                  f"{pct([(r[1] - r[4]) * 1e3 for r in checked], 50):>18.3f}")


def router(context: str, appends: list[int], repeats: int = 5) -> None:
    """One incremental call against one full tokenization, for appends of growing size."""
    tok = Tokenizer.from_pretrained(resolve_model("zllm-demo"))
    print(f"\nrouter: {len(context):,}-char context, then one append (ms, best of {repeats})")
    print(f"{'append':>9} {'incremental':>12} {'full':>9}")
    for n in appends:
        new = context + "\n" + context[-n:] if n else context + "\n"
        best_inc = best_full = float("inf")
        for k in range(repeats):
            inc = IncrementalTokenizer(tok, shadow_rate=0)
            inc.encode(context, "r", "k")
            best_inc = min(best_inc, timed(inc.encode, new, "r", "k")[0])
            best_full = min(best_full, timed(tok.encode, new, allowed_special="all")[0])
        print(f"{n:>9,} {best_inc * 1e3:>12.3f} {best_full * 1e3:>9.3f}")


def nfc_cost(context: str, repeats: int = 7) -> None:
    """One append onto the context: NFC of the whole text (what a call cost before sessions
    normalized incrementally) against NFC after the shared prefix, for an append already in
    NFC and for a decomposed one (which costs a copy of the text)."""
    tok = demo_tokenizer(nfc=True)
    print(f"\nNFC, {len(context):,}-char context, then one append (ms, best of {repeats})")
    print(f"{'append':>18} {'whole text':>11} {'after prefix':>13} {'ratio':>7}")
    for name, append in [("NFC", "\nappended caf\u00e9 text\n"), ("decomposed", "\nappended cafe\u0301 text\n")]:
        new = context + append
        assert tok.normalize(new, len(context)) == tok.normalize(new)
        whole = min(timed(tok.normalize, new)[0] for _ in range(repeats))
        prefix = min(timed(tok.normalize, new, len(context))[0] for _ in range(repeats))
        print(f"{name:>18} {whole * 1e3:>11.3f} {prefix * 1e3:>13.4f} {whole / prefix:>6.0f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, nargs="+", default=None,
                    help="JSONL traces (default: the generated 16-session agent trace)")
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--max-calls", type=int, default=100_000)
    ap.add_argument("--baseline-every", type=int, default=1, help="time the full baselines on every k-th call")
    ap.add_argument("--pad", type=int, default=0, help="a first user message of this many characters "
                    "of trace text in every session (contexts over 1M)")
    ap.add_argument("--router-context", type=int, default=1_000_000)
    ap.add_argument("--no-router", action="store_true")
    ap.add_argument("--nfc", action="store_true", help="the tokenizer normalizes to NFC, as Qwen's "
                    "tokenizer.json asks (incremental normalization; baselines do not normalize)")
    ap.add_argument("--one-thread", action="store_true", help="compare long prompts on the calling "
                    "thread only (ZLLM_SCAN_THREADS=1), not with the helper thread")
    ap.add_argument("--keyless", action="store_true", help="calls carry no session key: each finds its "
                    "session by the longest shared text prefix (checkpoint hashes)")
    ap.add_argument("--latency-only", action="store_true", help="the incremental pass only (no baselines); "
                    "exactness checked on every 50th call")
    args = ap.parse_args()
    args.trace = args.trace or [agent_trace()]
    if args.one_thread:
        os.environ["ZLLM_SCAN_THREADS"] = "1"  # read when the first long prompt is compared
    rows = replay(args.trace, args.sessions, args.max_calls, args.baseline_every, args.pad, args.latency_only,
                  args.nfc, args.keyless)
    print_bands(rows)
    if args.nfc:
        nfc_cost(trace_text(args.trace[-1], args.router_context))
    if args.no_router:
        return
    context = next(text for _, text in rendered_calls(args.trace[0], ChatTemplate.from_model_dir(
        resolve_model("zllm-demo")), 1, 1))
    while len(context) < args.router_context:
        context += context
    router(context[:args.router_context], [0, 1_000, 10_000, 30_000, 100_000, 300_000, 1_000_000])


if __name__ == "__main__":
    main()
