"""Prefix cache, device tier, on the embedded model, in one run:

    python bench/prefix_cache.py [--prefixes 1024 4096 16384 32768] [--sessions 6] [--trials 40]

1. Time to first token of a 32-token suffix after a cached prefix, hit against miss.
2. Token hit rate replaying the generated agent trace (bench/trace_replay.py, rendered through the
   demo model's chat template) at several cache sizes, one shared scope against a scope
   per tenant (5 tenants).  The replay runs the real PrefixCache and BlockPool; only the
   model is skipped (a token-level model of the same index).
3. The timing side channel: the probability that a cold probe is slower than a probe sent
   after another tenant used the same prefix, with a shared scope and with separate scopes.
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.prefix_cache import CacheRequest, PrefixCache
from zllm_core.cache.scope import CacheHint, Scope
from zllm_core.dialects.chat_template import ChatTemplate
from zllm_core.dialects.conversation import Message
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.model.model_names import resolve_model
from zllm_core.model.loader import load_model
from zllm_core.tokenizer import Tokenizer

from trace_replay import agent_trace, trace_requests  # bench/ is on sys.path when run as a script

FIRST_TOKEN = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)


def ttft(engine: LLMEngine, prompt: list[int], rid: str, hint: CacheHint = CacheHint()) -> tuple[float, int]:
    start = time.perf_counter()
    engine.add_request(rid, prompt, FIRST_TOKEN, hint)
    while True:
        outs = engine.step()
        if outs:
            return time.perf_counter() - start, outs[0].cached_tokens


def random_tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1000, 150000) for _ in range(n)]


def bench_ttft(engine: LLMEngine, prefixes: list[int]) -> None:
    rng = random.Random(0)
    print("\n1. time to first token, 32-token suffix after a prefix")
    print(f"{'prefix':>7} {'miss s':>9} {'hit s':>9} {'cached':>7} {'miss/hit':>9}")
    for n in prefixes:
        prefix = random_tokens(rng, n)
        miss, _ = ttft(engine, prefix + random_tokens(rng, 32), f"miss{n}")
        hit, cached = ttft(engine, prefix + random_tokens(rng, 32), f"hit{n}")
        print(f"{n:>7} {miss:>9.3f} {hit:>9.4f} {cached:>7} {miss / hit:>8.1f}x")


def bench_hit_rate(model_dir: Path, sessions: int, max_calls: int, sizes: list[int]) -> None:
    tokenizer = Tokenizer.from_pretrained(model_dir)
    template = ChatTemplate.from_model_dir(model_dir)
    prompts = []
    for s, system, tools, history in trace_requests(agent_trace(), sessions, max_calls):
        text = template.render([Message("system", system), *history], tools, add_generation_prompt=True)
        prompts.append((s, tokenizer.encode(text, allowed_special="all")))
    total = sum(len(p) for _, p in prompts)
    print(f"\n2. token hit rate, {len(prompts)} requests of {sessions} sessions ({total:,} prompt tokens)")
    print(f"{'cache tokens':>13} {'shared scope':>13} {'scope per tenant':>17}")
    for size in sizes:
        rates = []
        for per_tenant in (False, True):
            cache = PrefixCache(BlockPool(size // 16), describe=tokenizer.decode)
            for i, (s, tokens) in enumerate(prompts):
                scope = Scope("demo", tenant=f"t{s % 5}" if per_tenant else "").digest()
                replay_one(cache, f"r{i}", tokens, scope)
            rates.append(cache.stats.token_hit_rate)
        print(f"{size:>13,} {rates[0]:>12.1%} {rates[1]:>16.1%}")


def replay_one(cache: PrefixCache, rid: str, tokens: list[int], scope: bytes) -> None:
    """Match, 'compute' the rest into fresh blocks, register them, finish."""
    pool = cache.pool
    hit = cache.match(rid, tokens, CacheRequest(scope))
    need = -(-len(tokens) // pool.block_size) - len(hit.blocks)
    if need > pool.num_free:
        cache.evict(need - pool.num_free)
    fresh = pool.allocate(min(need, pool.num_free))
    table = hit.blocks.tolist() + fresh
    cache.commit(rid, tokens, table, len(table) * pool.block_size)
    pool.free(table)
    cache.release(rid, table, tokens)


def bench_side_channel(engine: LLMEngine, trials: int) -> None:
    rng = random.Random(1)
    print(f"\n3. timing side channel, {trials} trials, 512-token prefix, 32-token suffix")
    print(f"{'scopes':>9} {'P(cold probe slower)':>21}")
    for label, victim, attacker in (("shared", CacheHint(), CacheHint()),
                                    ("separate", CacheHint(tenant="victim"), CacheHint(tenant="attacker"))):
        slower = 0
        for t in range(trials):
            secret = random_tokens(rng, 512)
            ttft(engine, secret + random_tokens(rng, 32), f"v{label}{t}", victim)
            after, _ = ttft(engine, secret + random_tokens(rng, 32), f"a{label}{t}", attacker)
            cold, _ = ttft(engine, random_tokens(rng, 512) + random_tokens(rng, 32), f"c{label}{t}", attacker)
            slower += cold > after
        print(f"{label:>9} {slower / trials:>21.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefixes", type=int, nargs="+", default=[1024, 4096, 16384, 32768])
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--max-calls", type=int, default=60)
    ap.add_argument("--cache-sizes", type=int, nargs="+", default=[16384, 65536, 262144, 1048576])
    ap.add_argument("--trials", type=int, default=40)
    args = ap.parse_args()
    model_dir = resolve_model("zllm-demo")
    engine = LLMEngine(load_model(model_dir), None, EngineConfig(kv_cache_bytes=3 << 30), Scope("bench"))
    print(f"zllm-demo on {torch.get_num_threads()} torch threads")
    bench_ttft(engine, args.prefixes)
    bench_hit_rate(model_dir, args.sessions, args.max_calls, args.cache_sizes)
    bench_side_channel(engine, args.trials)


if __name__ == "__main__":
    main()
