"""Per-request CPU overhead of a long-context, cache-hit continuation, before and after the
request path moved to numpy token arrays.

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
import statistics
import time
from array import array
from pathlib import Path

import numpy as np

from zllm_core import _native
from zllm_core.cache.block_hash import chain_keys
from zllm_core.cache.scope import CacheHint, Scope
from zllm_core.cache.token_ids import common_prefix
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.sequence import Sequence
from zllm_core.model.causal_lm import CausalLM
from zllm_core.model.config import parse_config
from zllm_core.model.demo import CONFIG, GENERATION_CONFIG

BLOCK = 16
PARAMS = SamplingParams(max_tokens=256, temperature=0.0)
STAGES = ("handover", "snapshot", "admit", "match", "commit", "finish")


def bench_engine(context: int) -> LLMEngine:
    """A real engine over a one-layer model that is never run: its KV pool is tiny per token,
    so a pool for several 300K-token contexts costs megabytes."""
    raw = {**CONFIG, "hidden_size": 16, "intermediate_size": 16, "num_attention_heads": 1,
           "num_key_value_heads": 1, "head_dim": 16, "num_hidden_layers": 1,
           "max_position_embeddings": 4 * context}
    model = CausalLM(parse_config(raw, GENERATION_CONFIG, Path("bench")))
    per_token = 2 * 16 * 4  # K and V, one head of 16 fp32
    config = EngineConfig(kv_cache_bytes=3 * context * per_token, max_num_batched_tokens=4 * context)
    return LLMEngine(model, None, config, Scope("bench-request-overhead"))


def cpu_ms(fn) -> tuple[float, object]:
    start = time.process_time_ns()
    out = fn()
    return (time.process_time_ns() - start) / 1e6, out


def one_turn(engine: LLMEngine, rid: str, prompt: np.ndarray, hint: CacheHint) -> tuple[dict, Sequence]:
    """One request through the engine's bookkeeping; returns each stage's CPU ms."""
    t = {}
    t["handover"], _ = cpu_ms(lambda: prompt)
    t["snapshot"], ids = cpu_ms(lambda: np.array(prompt))
    t["admit"], _ = cpu_ms(lambda: engine.add_request(rid, ids, PARAMS, hint))
    t["match"], batch = cpu_ms(engine.scheduler.schedule)
    (chunk,) = batch.chunks
    seq = chunk.seq

    def commit():
        seq.num_computed += chunk.length
        engine.cache.commit(rid, seq.token_ids, seq.block_table, seq.num_computed)

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
    session = next(engine.cache.sessions.recent(seq.cache.scope))
    delta = {
        "handover": cpu_ms(prompt.tolist)[0] - cpu_ms(lambda: prompt)[0],
        "snapshot": cpu_ms(lambda: list(tokens))[0] - cpu_ms(lambda: np.array(prompt))[0],
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
        resident = array("i", session.tokens.tobytes())  # sessions held array('i') before
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
    prompt = rng.integers(1000, 150000, context, dtype=np.uint32)
    now, before = [], []
    for turn in range(warmup + turns):
        t, seq = one_turn(engine, f"{hint.tenant}-{turn}", prompt, hint)
        if turn >= warmup:
            delta = old_minus_new(engine, prompt, seq, keyless=hint.cache_id is None)
            now.append(t)
            before.append({k: t[k] + delta.get(k, 0.0) for k in STAGES})
        appended = rng.integers(1000, 150000, new, dtype=np.uint32)
        prompt = np.concatenate([seq.token_ids.astype(np.uint32), appended])
    return now, before


def median_total(runs: list[dict]) -> float:
    return statistics.median(sum(r.values()) for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="30000,100000,300000")
    ap.add_argument("--new", type=int, default=500, help="tokens appended per turn")
    ap.add_argument("--turns", type=int, default=8, help="timed turns per conversation")
    ap.add_argument("--warmup", type=int, default=3, help="untimed turns first (resident sessions)")
    args = ap.parse_args()
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
