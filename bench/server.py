"""The protocol layer's own cost: the same requests through the server and straight to the engine.

direct: the bench builds each prompt's token ids itself (same template, same tokenizer) and
streams `AsyncEngine.generate`. app: the same engine behind the server's ASGI app, called
in-process (validation, templating, tokenization, output parsing, encoding, SSE framing; no
sockets). http: a `zllm serve` subprocess on loopback, as users run it. N concurrent streams,
greedy, each request with a unique prefix so no mode gets prefix-cache hits another does not;
each cell is the median of --repeats alternating runs; overhead per request comes from the
1-token runs.

On a CPU the engine's step time (tens of ms) and its jitter dwarf the layer's per-token cost,
so a second table isolates it: the app in front of a replay engine that streams recorded
output instantly, where every microsecond measured is protocol-layer work.

    PYTHONPATH=. python bench/server.py [--streams 1 8] [--tokens 32] [--repeats 5]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zllm_core.engine.async_engine import AsyncEngine  # noqa: E402
from zllm_core.engine.output_processor import GenerationEvent  # noqa: E402
from zllm_core.engine.sampling_params import SamplingParams  # noqa: E402
from zllm_core.model.model_names import resolve_model  # noqa: E402
from zllm_core.protocols import openai_chat  # noqa: E402
from zllm_core.server.app import create_app  # noqa: E402
from zllm_core.server.prompt import PromptBuilder  # noqa: E402
from zllm_core.server.runtime import ServerConfig  # noqa: E402

MODEL = "zllm-demo"
SYSTEM = "You are a coding agent. Follow the repository conventions and keep answers short. " * 4


def question(i: int, run: str) -> str:
    return f"[{run}-{i}] List the files in src/ and explain what each does."


def chat_body(q: str, tokens: int) -> dict:
    return {"model": MODEL, "max_tokens": tokens, "temperature": 0, "stream": True,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]}


BODIES = {
    "chat": ("/v1/chat/completions", chat_body),
    "responses": ("/v1/responses", lambda q, t: {
        "model": MODEL, "instructions": SYSTEM, "input": q, "max_output_tokens": t,
        "temperature": 0, "stream": True}),
    "messages": ("/v1/messages", lambda q, t: {
        "model": MODEL, "system": SYSTEM, "max_tokens": t, "temperature": 0, "stream": True,
        "messages": [{"role": "user", "content": q}]}),
}


async def direct(engine: AsyncEngine, prompts: PromptBuilder, n: int, tokens: int, run: str) -> float:
    async def one(i: int) -> int:
        req = openai_chat.to_canonical(openai_chat.ChatRequest.model_validate(chat_body(question(i, run), tokens)))
        ids = prompts.build(req).token_ids
        count = 0
        params = SamplingParams(max_tokens=tokens, temperature=0)
        async for ev in engine.generate(ids, params, request_id=f"direct-{run}-{i}"):
            count += len(ev.token_ids)
        return count
    start = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(n)))
    assert sum(counts) == n * tokens, "a request stopped early; the comparison needs full runs"
    return time.perf_counter() - start


async def served(client: httpx.AsyncClient, protocol: str, n: int, tokens: int, run: str) -> float:
    path, body = BODIES[protocol]

    async def one(i: int) -> None:
        async with client.stream("POST", path, json=body(question(i, run), tokens)) as r:
            r.raise_for_status()
            async for _ in r.aiter_lines():
                pass
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - start


def start_server(max_model_len: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zllm_core.cli", "serve", "--model", MODEL, "--port", "0",
         "--max-model-len", str(max_model_len), "--response-store", ":memory:"],
        env=env, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        match = re.search(r"on (http://\S+)", line)
        if match:
            return proc, match.group(1)
    raise RuntimeError("zllm serve did not start")


class ReplayEngine:
    """Streams a recorded generation's text with no model work: what remains is the server's."""

    def __init__(self, engine: AsyncEngine, pieces: list[str]):
        self.tokenizer, self.max_model_len, self.pieces = engine.tokenizer, engine.max_model_len, pieces
        self.metrics = engine.metrics

    async def generate(self, prompt_ids, params, request_id=None, cache=None):
        n = min(params.max_tokens, len(self.pieces))
        for i in range(n):
            await asyncio.sleep(0)
            done = i == n - 1
            yield GenerationEvent([0], self.pieces[i], "length" if done else None, None,
                                  prompt_tokens=len(prompt_ids), cached_tokens=0, completion_tokens=i + 1)


async def record(engine: AsyncEngine, prompts: PromptBuilder, tokens: int) -> list[str]:
    req = openai_chat.to_canonical(openai_chat.ChatRequest.model_validate(chat_body("record", tokens)))
    params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)
    return [ev.text async for ev in engine.generate(prompts.build(req).token_ids, params)]


async def layer_cost(app, protocol: str, n: int, tokens: int, repeats: int) -> tuple[float, float]:
    """(ms per request, us per streamed token) of the app alone, from 1- and T-token runs."""
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app")
    async with client:
        run = lambda n, t, tag: served(client, protocol, n, t, tag)  # noqa: E731
        times = await measure({"app": run}, n, 1, repeats), await measure({"app": run}, n, tokens, repeats)
    short, long = times[0]["app"], times[1]["app"]
    return 1e3 * short / n, 1e6 * (long - short) / (n * (tokens - 1))


async def measure(modes: dict, n: int, tokens: int, repeats: int) -> dict[str, float]:
    """Median wall time per mode, modes alternating so drifting machine load hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in modes}
    for r in range(repeats):
        for name, run in modes.items():
            times[name].append(await run(n, tokens, f"{name}-{n}-{tokens}-{r}"))
    return {name: statistics.median(t) for name, t in times.items()}


async def main(args: argparse.Namespace) -> None:
    engine = AsyncEngine.from_model(MODEL, max_model_len=args.max_model_len)
    prompts = PromptBuilder.from_model_dir(resolve_model(MODEL), engine.tokenizer)
    config = ServerConfig(model_name=MODEL, max_model_len=args.max_model_len)
    app = create_app(engine, prompts, config)
    proc, url = start_server(args.max_model_len)
    clients = {"app": httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app", timeout=600),
               "http": httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=64))}
    try:
        print(f"{'protocol':<10} {'via':<5} {'streams':>7} {'tokens':>6} {'direct s':>9} {'served s':>9} "
              f"{'ratio':>6} {'ms/request':>10}")
        for protocol in BODIES:
            for n in args.streams:
                modes = {"direct": lambda n, t, run: direct(engine, prompts, n, t, run)}
                for via, client in clients.items():
                    modes[via] = lambda n, t, run, c=client: served(c, protocol, n, t, run)
                await measure(modes, 2, 2, 1)  # warm-up
                short = await measure(modes, n, 1, args.repeats)
                long = await measure(modes, n, args.tokens, args.repeats)
                for via in clients:
                    per_request = (short[via] - short["direct"]) / n
                    print(f"{protocol:<10} {via:<5} {n:>7} {args.tokens:>6} {long['direct']:>9.3f} "
                          f"{long[via]:>9.3f} {long[via] / long['direct']:>6.2f} "
                          f"{1e3 * per_request:>10.2f}")
        replay = create_app(ReplayEngine(engine, await record(engine, prompts, 512)), prompts, config)
        print(f"\nlayer alone (replay engine, {args.replay_tokens} tokens per stream)")
        print(f"{'protocol':<10} {'streams':>7} {'ms/request':>10} {'us/token':>9}")
        for protocol in BODIES:
            for n in args.streams:
                per_request, per_token = await layer_cost(replay, protocol, n, args.replay_tokens,
                                                          args.repeats)
                print(f"{protocol:<10} {n:>7} {per_request:>10.2f} {per_token:>9.1f}")
    finally:
        for client in clients.values():
            await client.aclose()
        proc.terminate()
        proc.wait()
        engine.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--replay-tokens", type=int, default=512)
    parser.add_argument("--max-model-len", type=int, default=4096)
    asyncio.run(main(parser.parse_args()))
