"""Per-request CPU overhead of a long-context, cache-hit continuation.

``--asgi`` (issue 21): server CPU time per turn through the ASGI app, from the request body
to the first scheduled chunk, beside the body's JSON parse time (the standard parser and
orjson) in the same run. A chat conversation of trace text grows by ``--append`` characters
a turn (the previous answer and a new user message) and is sent whole, as agents send it, to
the real app (middleware, validation, template, prompt ids, admission) over the real engine
bookkeeping (add_request, the scheduler's prefix match); the model is not run (the mark is
taken when the first chunk is scheduled; then the turn is finished in bookkeeping only, so the
next turn finds it resident). "with id" turns carry prompt_cache_key. The engine's stages are
printed beside: AsyncEngine's snapshot, add_request and the schedule (all inside the server
time), and the finish (commit and release, after it).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python bench/request_overhead.py --asgi [--chars 30000,300000,1000000]

Without ``--asgi``: the engine objects alone, before and after the request path moved to
numpy token arrays.

What is timed (CPU time, median over the timed turns): one turn of a conversation whose
context is already resident -- the previous turn's prompt, its sampled token, then
``--new`` appended tokens -- through the real objects an engine step uses, with the model
NOT run:

* handover: PromptBuilder.build giving the tokenizer's array to the engine (it was ``tolist()``;
  the array is now the tokenizer session's own read-only one, handed over as it is);
* snapshot: AsyncEngine.generate's copy of the prompt;
* admit: LLMEngine.add_request (validation, the sequence's token buffer, queueing);
* match: Scheduler.schedule (prefix-cache lookup and adoption, block allocation);
* commit: PrefixCache.commit of the prefilled chunk, as LLMEngine.step does after the model;
* finish: the sampled token appended, Scheduler.finish (release, terminal session recorded).

"with id" turns carry a cache id (the exact-id path); "keyless" turns do not (the
longest-prefix path, with every earlier turn of that conversation resident as a session).

The peer, in the same run: the path before this change, rebuilt as the measured path plus,
for each operation it replaced, the old operation's time minus the new one's, both timed on
the same tokens: ``tolist``; ``list()`` copies in generate and in the sequence;
``min``/``max`` over a list; ``array("i", list)`` conversions in the exact-id compare and in
the recorded session; and in the keyless lookup, chain keys of every usable block from a
list (the old lookup) against the keys of the blocks after the closest session plus one
vectorised compare with it (the new one). The per-block bookkeeping both paths do (the
index's key lookups, reference counts, the eviction queue, block allocation) counts as it is
now in both, although this change also made it several times cheaper (numpy reference counts
and eviction order instead of a Python loop and queue move per block): the ratio understates
the gain.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python bench/request_overhead.py [--sizes 30000,100000,300000]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from array import array
from pathlib import Path

import numpy as np
import orjson

from zllm_core import _native
from zllm_core.cache.block_hash import chain_keys
from zllm_core.cache.scope import CacheHint
from zllm_core.cache.token_ids import common_prefix, token_array
from zllm_core.engine.async_engine import prompt_snapshot
from zllm_core.engine.llm_engine import LLMEngine
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.sequence import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asgi_call import post_json  # noqa: E402  (bench/ is on sys.path when run as a script)
from bookkeeping_engine import BookkeepingEngine, bench_engine  # noqa: E402
from trace_replay import agent_trace, trace_text  # noqa: E402

BLOCK = 16
PARAMS = SamplingParams(max_tokens=256, temperature=0.0)
STAGES = ("handover", "snapshot", "admit", "match", "commit", "finish")


def cpu_ms(fn) -> tuple[float, object]:
    start = time.process_time_ns()
    out = fn()
    return (time.process_time_ns() - start) / 1e6, out


def one_turn(engine: LLMEngine, rid: str, prompt: np.ndarray, hint: CacheHint) -> tuple[dict, Sequence]:
    """One request through the engine's bookkeeping; returns each stage's CPU ms."""
    t = {}
    t["handover"], _ = cpu_ms(lambda: prompt)
    t["snapshot"], ids = cpu_ms(lambda: prompt_snapshot(prompt))
    t["admit"], _ = cpu_ms(lambda: engine.add_request(rid, ids, PARAMS, hint))
    t["match"], batch = cpu_ms(engine.scheduler.schedule)
    (chunk,) = batch.chunks
    seq = chunk.seq

    def commit():
        seq.num_computed += chunk.length
        engine.kv.commit(rid, seq.token_ids, seq.block_table, seq.num_computed)

    def finish():
        seq.append(7)  # the sampled token, a stop token
        engine.scheduler.finish(seq, "stop")

    t["commit"], _ = cpu_ms(commit)
    t["finish"], _ = cpu_ms(finish)
    return t, seq


def old_minus_new(engine: LLMEngine, prompt: np.ndarray, seq: Sequence, keyless: bool) -> dict:
    """For each replaced operation, the old one's CPU ms minus the new one's, same tokens."""
    tokens = prompt.tolist()
    usable = (len(prompt) - 1) // BLOCK
    session = next(engine.kv.cache.sessions.recent(seq.cache.scope))
    delta = {
        "handover": cpu_ms(prompt.tolist)[0] - cpu_ms(lambda: prompt)[0],
        "snapshot": cpu_ms(lambda: list(tokens))[0] - cpu_ms(lambda: prompt_snapshot(prompt))[0],
        "admit": (cpu_ms(lambda: (min(tokens), max(tokens), list(tokens)))[0]
                  - cpu_ms(lambda: (prompt.min(), prompt.max(), Sequence("x", prompt, PARAMS, 0)))[0]),
        "finish": cpu_ms(lambda: array("i", tokens))[0] - cpu_ms(lambda: np.array(seq.token_ids))[0],
    }
    if keyless:
        reused = min(len(session.keys), usable)
        old = cpu_ms(lambda: _native.block_hashes(array("i", tokens[:usable * BLOCK]), BLOCK, b"",
                                                  seq.cache.scope, "sha256"))[0]
        new = cpu_ms(lambda: (common_prefix(session.tokens, prompt),
                              chain_keys(prompt[reused * BLOCK:usable * BLOCK], BLOCK, seq.cache.scope,
                                         session.keys[-1])))[0]
    else:
        resident = array("i", token_array(session.tokens).tobytes())  # sessions held array('i') before
        old = cpu_ms(lambda: old_common_prefix(resident, tokens))[0]
        new = cpu_ms(lambda: common_prefix(session.tokens, prompt))[0]
    delta["match"] = old - new
    return delta


def old_common_prefix(a: array, b: list[int]) -> int:
    """The compare before this change: the request's list as array('i'), equal slices at C speed."""
    b = array("i", b)
    n, i, step = min(len(a), len(b)), 0, 4096
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def conversation(engine: LLMEngine, context: int, new: int, turns: int, warmup: int,
                 hint: CacheHint, rng: np.random.Generator) -> tuple[list[dict], list[dict]]:
    """Grow one conversation to ``context`` tokens, then time ``turns`` continuations."""
    prompt = frozen(rng.integers(1000, 150000, context, dtype=np.uint32))
    now, before = [], []
    for turn in range(warmup + turns):
        t, seq = one_turn(engine, f"{hint.tenant}-{turn}", prompt, hint)
        if turn >= warmup:
            delta = old_minus_new(engine, prompt, seq, keyless=hint.cache_id is None)
            now.append(t)
            before.append({k: t[k] + delta.get(k, 0.0) for k in STAGES})
        appended = rng.integers(1000, 150000, new, dtype=np.uint32)
        prompt = frozen(np.concatenate([token_array(seq.token_ids).view(np.uint32), appended]))
    return now, before


def frozen(ids: np.ndarray) -> np.ndarray:
    """Read-only, as the tokenizer hands its prompt arrays over."""
    ids.flags.writeable = False
    return ids


def median_total(runs: list[dict]) -> float:
    return statistics.median(sum(r.values()) for r in runs)


def asgi_app(context_chars: int):
    from zllm_core.model.model_names import resolve_model
    from zllm_core.server.app import create_app
    from zllm_core.server.prompt import PromptBuilder
    from zllm_core.server.runtime import ServerConfig
    from zllm_core.tokenizer import Tokenizer

    model_dir = resolve_model("zllm-demo")
    tokenizer = Tokenizer.from_pretrained(model_dir)
    eos = tokenizer.encode("<|im_end|>", allowed_special="all")[0]
    engine = BookkeepingEngine(bench_engine(context_chars // 2), [eos])
    config = ServerConfig(model_name="zllm-demo", max_body_bytes=1 << 30)
    return create_app(engine, PromptBuilder.from_model_dir(model_dir, tokenizer), config), engine


def asgi_turns(context: int, append: int, turns: int, warmup: int, keyed: bool) -> list[dict]:
    """CPU ms per timed turn: the server to the first scheduled chunk, and the body's parse.
    All turns run on one event loop, as a server's requests do (a loop per turn would time
    the loop's and its thread pool's start-up as the server's)."""
    app, engine = asgi_app(context)
    text = trace_text(agent_trace(), context + (warmup + turns + 1) * append)
    messages = [{"role": "system", "content": text[:8000]}]
    at = 8000
    while at < context:  # the history: user messages of `append` characters, answered
        messages += [{"role": "user", "content": text[at:at + append]}, {"role": "assistant", "content": ""}]
        at += append

    async def run() -> list[dict]:
        nonlocal at
        out = []
        for turn in range(warmup + turns):
            messages.append({"role": "user", "content": text[at:at + append]})
            at += append
            body = json.dumps({"model": "zllm-demo", "messages": messages, "max_tokens": 1,
                               **({"prompt_cache_key": "conv"} if keyed else {})}).encode()
            start = time.process_time_ns()
            status, reply = await post_json(app, "/v1/chat/completions", body)
            server = (engine.marked - start) / 1e6
            assert status == 200, reply[:300]
            if turn >= warmup:
                usage = orjson.loads(reply)["usage"]
                out.append({"server": server, "json": cpu_ms(lambda: json.loads(body))[0],
                            "orjson": cpu_ms(lambda: orjson.loads(body))[0], "bytes": len(body),
                            "cached": usage["prompt_tokens_details"]["cached_tokens"], **engine.stages,
                            "prompt": usage["prompt_tokens"]})
            messages.append({"role": "assistant", "content": ""})  # the answer, resent next turn
        return out
    return asyncio.run(run())


def main_asgi(args) -> None:
    print(f"{'context':>9} {'path':>8} {'body MB':>8} {'server ms':>10} {'json ms':>8} {'orjson ms':>10} "
          f"{'server/json':>12} {'server/orjson':>14} {'hit rate':>9}   engine stages (ms): in the server time, then after it")
    for chars in map(int, args.chars.split(",")):
        for keyed in (True, False):
            runs = asgi_turns(chars, args.append, args.turns, args.warmup, keyed)
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            hit = sum(r["cached"] for r in runs) / sum(r["prompt"] for r in runs)
            print(f"{chars:>9,} {'with id' if keyed else 'keyless':>8} {med['bytes'] / 1e6:>8.2f} "
                  f"{med['server']:>10.2f} {med['json']:>8.2f} {med['orjson']:>10.2f} "
                  f"{med['server'] / med['json']:>11.2f}x {med['server'] / med['orjson']:>13.2f}x {hit:>9.4f}   "
                  + " ".join(f"{k} {med[k]:.3f}" for k in ("snapshot", "add_request", "schedule", "finish")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="30000,100000,300000")
    ap.add_argument("--new", type=int, default=500, help="tokens appended per turn")
    ap.add_argument("--turns", type=int, default=8, help="timed turns per conversation")
    ap.add_argument("--warmup", type=int, default=3, help="untimed turns first (resident sessions)")
    ap.add_argument("--asgi", action="store_true", help="through the ASGI app (issue 21)")
    ap.add_argument("--chars", default="30000,300000,1000000", help="--asgi: context sizes in characters")
    ap.add_argument("--append", type=int, default=1400, help="--asgi: characters appended per turn")
    args = ap.parse_args()
    if args.asgi:
        return main_asgi(args)
    rng = np.random.default_rng(0)
    print(f"{'context':>8} {'path':>8} {'before ms':>10} {'now ms':>8} {'ratio':>7}   now by stage (ms)")
    for context in map(int, args.sizes.split(",")):
        engine = bench_engine(context)
        for label, hint in (("with id", CacheHint(tenant="id", cache_id="conv")),
                            ("keyless", CacheHint(tenant="keyless"))):
            now, before = conversation(engine, context, args.new, args.turns, args.warmup, hint, rng)
            stages = " ".join(f"{k} {statistics.median(r[k] for r in now):.3f}" for k in STAGES)
            b, n = median_total(before), median_total(now)
            print(f"{context:>8} {label:>8} {b:>10.2f} {n:>8.2f} {b / n:>6.1f}x   {stages}")


if __name__ == "__main__":
    main()
