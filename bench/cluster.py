"""Cluster routing on the agent trace: token hit rate and modeled TTFT of round-robin against
zllm's affinity routing, with 2 and 4 replicas, and a single replica holding everything.

The trace's sessions run concurrently, one call per session per wave (a wave is what is in
flight at once: the load the router sees), arriving in a shuffled order each wave. Prompts are built once, as the ingress builds them
(the demo model's template and incremental tokenizer, each call's answer recorded as the
ids the model generated), so every routing sees the same token ids and conversation ids.
Each replica is the real engine bookkeeping (bench/bookkeeping_engine.py: scheduler, prefix
cache, block pool) with the model not run: four CPU replicas of even the demo model at these
contexts (up to ~100K tokens) do not fit two shared cores. Replicas publish their summaries
(BlockSummary, at most 4,096 sampled keys) once per wave, as Ray Serve's routing period would.

Routings: `single` (one replica, the ceiling), `round-robin` (request i to replica i mod N,
a stateless balancer), `prefix` (ours without conversation ids: the published summaries
alone, as after an ingress restart), `affinity` (ours: conversation pins, then summaries,
load breaking ties, balance past the threshold). Every replica has room for the whole trace,
so the differences are where the state is, not how much fits.

TTFT is modeled, not measured on these replicas: the demo model's prefill time for the
uncached tokens, at the rate measured in this run (a cold 2048-token prefill, real engine);
queueing is left out, so it restates uncached tokens in seconds.

    PYTHONPATH=$PWD python bench/cluster.py [--sessions 16] [--max-calls 30]
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bookkeeping_engine import BookkeepingEngine, bench_engine  # noqa: E402
from exact_history import END, bodies, pieces  # noqa: E402

from zllm_core.cache.scope import CacheHint, Scope  # noqa: E402
from zllm_core.cluster.policy import AffinityPolicy, ReplicaView, Route, RouteKeys  # noqa: E402
from zllm_core.cluster.summary import BlockSummary  # noqa: E402
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine  # noqa: E402
from zllm_core.engine.sampling_params import SamplingParams  # noqa: E402
from zllm_core.model.model_names import resolve_model  # noqa: E402
from zllm_core.protocols import openai_chat  # noqa: E402
from zllm_core.server.prompt import PromptBuilder  # noqa: E402
from zllm_core.tokenizer import Tokenizer  # noqa: E402


@dataclass(frozen=True)
class Call:
    session: int
    ids: np.ndarray
    conversation: str
    answer: list[int]


def build_calls(sessions: int, max_calls: int) -> list[list[Call]]:
    """Waves of calls (call k of every session that has one), prompts built as the ingress
    builds them, each answer recorded before the session's next call is built."""
    model_dir = resolve_model("zllm-demo")
    tok = Tokenizer.from_pretrained(model_dir)
    end = tok.encode(END, allowed_special="all")
    builder = PromptBuilder.from_model_dir(model_dir, tok)
    by_session: dict[int, list[bytes]] = {}
    for s, body in bodies(sessions, max_calls):
        by_session.setdefault(s, []).append(body)
    requests = {s: [openai_chat.to_canonical(openai_chat.ChatRequest.model_validate_json(b)) for b in bs]
                for s, bs in by_session.items()}
    texts = {s: [builder.render(r) for r in rs] for s, rs in requests.items()}
    waves, arrivals = [], random.Random(7)
    for k in itertools.count():
        wave = []
        for s, rs in requests.items():
            if k >= len(rs):
                continue
            prompt = builder.build(rs[k], "")
            nxt = texts[s][k + 1] if k + 1 < len(rs) else ""
            said = nxt[len(texts[s][k]):].split(END)[0] if nxt.startswith(texts[s][k]) else "Done."
            answer = pieces(tok, said) + end
            builder.record(prompt, np.array(answer, np.uint32))
            wave.append(Call(s, np.array(prompt.token_ids), prompt.conversation, answer))
        if not wave:
            return waves
        arrivals.shuffle(wave)  # sessions do not arrive in a fixed order: a balancer's turn is no pin
        waves.append(wave)


Router = Callable[[Route, dict[int, ReplicaView]], int]


def round_robin() -> Router:
    turn = itertools.count()
    return lambda route, views: next(turn) % len(views)


def affinity(use_ids: bool) -> Router:
    policy = AffinityPolicy()

    def route_to(route: Route, views: dict[int, ReplicaView]) -> int:
        if not use_ids:
            route = Route(route.tenant, None, route.words)
        replica = policy.choose(route, views)[0]
        policy.routed(route, replica)
        return replica
    route_to.policy = policy  # type: ignore[attr-defined]
    return route_to


def replay(waves: list[list[Call]], replicas: int, router: Router, context: int) -> list[tuple[int, int, int]]:
    """(prompt tokens, cached tokens, replica) of every call, routed by `router` over `replicas` engines."""
    engines = [BookkeepingEngine(bench_engine(context), []) for _ in range(replicas)]
    base = engines[0].engine
    keys = RouteKeys(base.scope, base.config.block_size, base.config.block_hash)
    out, rid = [], itertools.count()
    for wave in waves:
        summaries = {i: BlockSummary.of(e.engine.kv.cache.index.keys()) for i, e in enumerate(engines)}
        load = dict.fromkeys(range(replicas), 0)
        placed = []
        for call in wave:  # all of the wave is in flight before any finishes
            hint = CacheHint("", call.conversation)
            replica = router(keys.route(call.ids, hint), {i: ReplicaView(load[i], summaries[i]) for i in load})
            load[replica] += 1
            placed.append((call, replica, hint))
        for call, replica, hint in placed:
            engine = engines[replica]
            engine.answer = call.answer
            event = asyncio.run(_last(engine.generate(call.ids, SamplingParams(max_tokens=len(call.answer)),
                                                      f"r{next(rid)}", hint)))
            out.append((event.prompt_tokens, event.cached_tokens, replica))
    return out


async def _last(events):
    last = None
    async for last in events:
        pass
    return last


def prefill_rate(n: int = 2048) -> float:
    """Seconds per token of the demo model's cold prefill of `n` tokens (real engine, best of
    three, in this run)."""
    engine = LLMEngine.from_config(EngineConfig(model="zllm-demo", enable_prefix_cache=False,
                                                max_num_batched_tokens=n))
    rng = np.random.default_rng(3)
    best = float("inf")
    for i in range(3):
        start = time.perf_counter()
        engine.add_request(f"p{i}", rng.integers(100, 40_000, n), SamplingParams(max_tokens=1))
        while engine.has_unfinished():
            engine.step()
        best = min(best, time.perf_counter() - start)
    return best / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--max-calls", type=int, default=30)
    args = ap.parse_args()
    logging.getLogger("zllm").setLevel(logging.ERROR)  # the trace's compactions log near-misses
    waves = build_calls(args.sessions, args.max_calls)
    calls = [c for w in waves for c in w]
    context = max(len(c.ids) + len(c.answer) for c in calls)
    whole = sum(max(len(c.ids) + len(c.answer) for c in calls if c.session == s) for s in {c.session for c in calls})
    per_token = prefill_rate()
    print(f"{len(calls)} calls of {args.sessions} sessions in {len(waves)} waves; prompts up to {context} tokens, "
          f"{whole} tokens of final contexts in all; demo-model prefill {per_token * 1e6:.1f} us/token "
          f"(cold 2048 tokens, this run)")
    runs: list[tuple[str, int, Optional[Callable[[], Router]]]] = [("single", 1, round_robin)]
    for n in (2, 4):
        runs += [("round-robin", n, round_robin), ("prefix", n, lambda: affinity(False)),
                 ("affinity", n, lambda: affinity(True))]
    print(f"{'routing':<12} {'replicas':>8} {'hit rate':>9} {'vs single':>10} {'TTFT p50':>9} {'TTFT p90':>9} "
          f"{'TTFT mean':>10} {'calls per replica':>18}  decisions")
    ceiling = None
    for name, n, make in runs:
        router = make()
        rows = replay(waves, n, router, max(context, whole // 2))  # room for all of it: 1.5x whole
        prompt, cached = (sum(r[i] for r in rows) for i in (0, 1))
        rate = cached / prompt
        ceiling = rate if ceiling is None else ceiling
        ttft = np.array([per_token * (p - c) for p, c, _ in rows])
        calls_on = np.bincount([r for _, _, r in rows], minlength=n)
        decisions = getattr(router, "policy", None)
        print(f"{name:<12} {n:>8} {rate:>9.4f} {100 * (rate - ceiling):>+9.2f}p {np.median(ttft) * 1e3:>7.1f}ms "
              f"{np.percentile(ttft, 90) * 1e3:>7.1f}ms {ttft.mean() * 1e3:>8.1f}ms "
              f"{'/'.join(map(str, calls_on)):>18}  {decisions.decisions if decisions else ''}")


if __name__ == "__main__":
    main()
