"""Soak: many agent sessions at once against a live `zllm serve`, through the official SDKs.

Each session replays one of the agent trace's sessions, call after call, in one protocol:
OpenAI Chat, Responses over SSE, Responses over the WebSocket, or Anthropic Messages, each
request streamed or not at random. Some clients vanish mid-stream (the SDK stream closed after
a few events), some give up before their answer (the request's task cancelled), a share of
requests force a tool call. It runs for a bounded time and number of requests, then checks the
server the way an operator would: no 5xx anywhere (SDK status errors, in-stream error events,
the server's access log), no stream the SDK failed to parse or that ended without its closing
event, the KV pool exactly empty once the clients are gone (from /metrics), the server's RSS
after warm-up against its end, and time to first event per protocol.

The trace's contexts grow to hundreds of K characters; the embedded model's is 8K tokens, so
the replay clips the system prompt and every message, and compacts a session (the way an
agent does: a summary, then the calls go on) once its history passes --history-chars.

    python bench/soak.py --sessions 32 --duration 600 --disconnect 0.1      # starts zllm serve
    python bench/soak.py --url http://127.0.0.1:8000 --api-key KEY ...     # a running server
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import anthropic
import httpx
import openai

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from soak_clients import (  # noqa: E402  (bench/ is on sys.path)
    Call, ChatClient, MessagesClient, Outcome, Plan, ResponsesClient, SocketClient,
)
from trace_replay import agent_trace, apply_event  # noqa: E402
from zllm_core.dialects.conversation import Message  # noqa: E402

PROTOCOLS = ("chat", "responses", "responses_ws", "messages")


@dataclass(frozen=True)
class SoakConfig:
    sessions: int = 32
    duration: float = 600.0  # seconds during which sessions start new requests
    max_requests: int = 100_000
    disconnect: float = 0.1  # share of requests whose client leaves mid-request
    cancel: float = 0.05  # share cancelled by the client within a second of sending
    forced_tools: float = 0.15  # share with a forced tool call
    stream: float = 0.7  # share streamed (the WebSocket always streams)
    max_tokens: int = 24
    system_chars: int = 1500
    tools: int = 12  # of the trace's tool schemas, kept in every request
    message_chars: int = 600
    history_chars: int = 8000
    warmup: float = 0.2  # share of the duration before the RSS baseline is taken
    request_timeout: float = 900.0
    seed: int = 28


# -- the trace ---------------------------------------------------------------------------


def replay(session: dict[str, Any], cfg: SoakConfig) -> Iterator[Call]:
    """One trace session's calls, clipped to the model's context, forever (it starts over)."""
    system = session["system"][:cfg.system_chars]
    while True:
        history: list[Message] = []
        done = 0
        for call in session["calls"]:
            for event in session["events"][done:call]:
                clipped = {**event, "content": (event.get("content") or "")[:cfg.message_chars]}
                history = apply_event(history, clipped)
            done = call
            if sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in history) > cfg.history_chars:
                history = compacted(history)
            yield Call(system, session["tools"][:cfg.tools], list(history))


def compacted(history: list[Message]) -> list[Message]:
    """A summary, then what the next request still needs: its open tool calls and results, or
    the last user turn."""
    start = max(i for i, m in enumerate(history) if m.role == "user" or m.tool_calls)
    return [Message("user", "Summary of the work so far: the agent read and edited files.")] + history[start:]


# -- the sessions ---------------------------------------------------------------------------


@dataclass
class Tally:
    outcomes: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    ttft: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    problems: list[str] = field(default_factory=list)  # the first few, for the report
    forced: int = 0
    forced_called: int = 0
    requests: int = 0

    def add(self, protocol: str, plan: Plan, out: Outcome) -> None:
        self.outcomes[protocol][out.kind] += 1
        if out.ttft is not None and out.kind == "ok":
            self.ttft[protocol].append(out.ttft)
        if plan.forced and out.kind == "ok":
            self.forced += 1
            self.forced_called += out.called
        if out.kind in ("server_error", "malformed") and len(self.problems) < 20:
            self.problems.append(f"{protocol}: {out.kind}: {out.detail}")

    def count(self, kind: str) -> int:
        return sum(by_kind[kind] for by_kind in self.outcomes.values())


async def outcome_of(send: Callable[[], Awaitable[Outcome]], plan: Plan) -> Outcome:
    """The request's outcome, its failures sorted into the server's and the client's."""
    try:
        if plan.cancel_after is None:
            return await send()
        return await asyncio.wait_for(send(), plan.cancel_after)
    except (TimeoutError, asyncio.TimeoutError):
        return Outcome("cancelled")
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        kind = "server_error" if exc.status_code >= 500 else "client_error"
        return Outcome(kind, f"{exc.status_code}: {str(exc)[:300]}")
    except (openai.APIConnectionError, anthropic.APIConnectionError) as exc:
        return Outcome("server_error", f"connection: {exc!r}"[:300])
    except (openai.APIError, anthropic.APIError) as exc:  # an error event inside a stream
        return Outcome("server_error", f"in-stream: {str(exc)[:300]}")
    except Exception as exc:  # noqa: BLE001 - anything else is a frame the SDK could not parse
        return Outcome("malformed", f"{type(exc).__name__}: {str(exc)[:300]}")


class Soak:
    def __init__(self, url: str, api_keys: list[str], model: str, trace: Path, cfg: SoakConfig):
        self.url, self.keys, self.model, self.cfg = url, api_keys, model, cfg
        with trace.open() as f:
            self.trace = [json.loads(line) for line in f]
        self.tally = Tally()
        self.deadline = 0.0

    def _client(self, protocol: str, key: str) -> Any:
        timeout = self.cfg.request_timeout
        if protocol == "messages":
            return MessagesClient(anthropic.AsyncAnthropic(base_url=self.url, api_key=key, max_retries=0,
                                                           timeout=timeout), self.model)
        sdk = openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=timeout)
        return {"chat": ChatClient, "responses": ResponsesClient, "responses_ws": SocketClient}[protocol](sdk, self.model)

    def plan(self, rng: random.Random, protocol: str) -> Plan:
        cfg = self.cfg
        stream = protocol == "responses_ws" or rng.random() < cfg.stream
        leave = rng.random() < cfg.disconnect
        cancel = not leave and rng.random() < cfg.cancel
        return Plan(stream=stream, forced=rng.random() < cfg.forced_tools,
                    leave_after=rng.randint(1, 6) if leave and stream else None,
                    cancel_after=rng.uniform(0.05, 1.0) if cancel else
                    rng.uniform(0.5, 5.0) if leave and not stream else None,
                    temperature=rng.choice([0.0, 0.7]))

    async def session(self, i: int) -> None:
        protocol = PROTOCOLS[i % len(PROTOCOLS)]
        rng = random.Random(self.cfg.seed * 1000 + i)
        client = self._client(protocol, self.keys[i % len(self.keys)])
        calls = replay(self.trace[i % len(self.trace)], self.cfg)
        try:
            while time.monotonic() < self.deadline and self.tally.requests < self.cfg.max_requests:
                self.tally.requests += 1
                plan = self.plan(rng, protocol)
                call = next(calls)
                max_tokens = self.cfg.max_tokens * (2 if plan.forced else 1)
                out = await outcome_of(lambda: client.send(call, plan, max_tokens), plan)
                if plan.cancel_after is not None and out.kind == "cancelled" and isinstance(client, SocketClient):
                    await client.close()
                self.tally.add(protocol, plan, out)
        finally:
            if isinstance(client, SocketClient):
                await client.close()

    async def run(self, rss: Callable[[], int] | None = None) -> "Report":
        start = time.monotonic()
        self.deadline = start + self.cfg.duration
        samples: list[MemorySample] = []
        sampler = asyncio.create_task(_sample_memory(self.url, rss, start, samples)) if rss else None
        await asyncio.gather(*(self.session(i) for i in range(self.cfg.sessions)))
        if sampler:
            sampler.cancel()
        elapsed = time.monotonic() - start
        pool = await settled_pool(self.url)
        if rss:
            samples.append(await memory(self.url, rss, start))
        return Report(self.cfg, self.tally, elapsed, pool, samples, self.cfg.warmup * self.cfg.duration)


@dataclass(frozen=True)
class MemorySample:
    at: float  # seconds since the start
    rss: int  # the server's resident bytes
    sessions: int  # of them, the tokenizer's session store (a cache bounded by its budget)


async def memory(url: str, rss: Callable[[], int], start: float) -> MemorySample:
    async with httpx.AsyncClient(timeout=30) as http:
        tokenizer = (await http.get(url + "/metrics.json")).json()["tokenizer"]
    return MemorySample(time.monotonic() - start, rss(), tokenizer["session_bytes"])


async def _sample_memory(url: str, rss: Callable[[], int], start: float, samples: list[MemorySample]) -> None:
    while True:
        samples.append(await memory(url, rss, start))
        await asyncio.sleep(2.0)


POOL_GAUGES = {"running": r"^zllm_requests_running (\S+)", "waiting": r"^zllm_requests_waiting (\S+)",
               "used_blocks": r'^zllm_kv_blocks\{state="used"\} (\S+)',
               "cached_blocks": r"^zllm_prefix_cache_indexed_blocks (\S+)"}


def pool_empty(state: dict[str, float]) -> bool:
    """Nothing runs or waits, and every block in use is the prefix index's alone (it holds one
    reference on each block it maps): no request left a block behind."""
    return state["running"] == state["waiting"] == 0 and state["used_blocks"] == state["cached_blocks"]


async def pool_state(url: str) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(url + "/metrics")).text
    return {name: float(re.search(pattern, text, re.M).group(1)) for name, pattern in POOL_GAUGES.items()}


async def settled_pool(url: str, wait: float = 30.0) -> dict[str, float]:
    """The pool once the clients are gone: aborts reach the engine thread a step later."""
    deadline = time.monotonic() + wait
    while True:
        state = await pool_state(url)
        if pool_empty(state) or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.5)


def rss_of(pid: int) -> Callable[[], int]:
    def read() -> int:
        status = Path(f"/proc/{pid}/status").read_text()
        return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1)) * 1024
    return read


# -- the report -----------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Report:
    cfg: SoakConfig
    tally: Tally
    elapsed: float
    pool: dict[str, float]
    memory: list[MemorySample]
    warm_at: float  # seconds since the start
    access_5xx: int = 0  # status >= 500 in the server's access log
    log_errors: int = 0  # tracebacks and ERROR lines in the server's log

    @property
    def server_errors(self) -> int:
        return self.tally.count("server_error")

    @property
    def malformed(self) -> int:
        return self.tally.count("malformed")

    @property
    def pool_empty(self) -> bool:
        return pool_empty(self.pool)

    def rss_growth(self) -> float | None:
        """RSS at the end against the first sample after warm-up."""
        warm = [m for m in self.memory if m.at >= self.warm_at]
        return (warm[-1].rss - warm[0].rss) / warm[0].rss if len(warm) >= 2 else None

    def memory_lines(self) -> list[str]:
        """RSS after warm-up at each quarter of the rest of the run, and how much of its growth
        the tokenizer's session store (a cache that fills up to its budget) accounts for."""
        warm = [m for m in self.memory if m.at >= self.warm_at]
        if len(warm) < 2:
            return ["server RSS: not measured"]
        first, last = warm[0], warm[-1]
        quarters = [warm[min(len(warm) - 1, q * (len(warm) - 1) // 4)] for q in range(5)]
        other = (last.rss - last.sessions) - (first.rss - first.sessions)
        return [f"server RSS: {self.memory[0].rss / 2**20:.0f} MiB at start; after warm-up "
                + ", ".join(f"{m.rss / 2**20:.0f} ({m.at:.0f} s)" for m in quarters)
                + f" MiB: {self.rss_growth() * 100:+.2f}%",
                f"  of the growth, tokenizer sessions {(last.sessions - first.sessions) / 2**20:+.0f} MiB "
                f"({last.sessions / 2**20:.0f} MiB held); the rest {other / 2**20:+.0f} MiB, "
                f"{other / first.rss * 100:+.2f}% of the RSS"]

    def table(self) -> str:
        kinds = ("ok", "left", "cancelled", "client_error", "server_error", "malformed")
        lines = [f"{'protocol':<13}" + "".join(f"{k:>13}" for k in kinds) + f"{'ttft p50 s':>12}{'ttft p99 s':>12}"]
        for protocol in PROTOCOLS:
            by_kind = self.tally.outcomes.get(protocol, {})
            ttft = self.tally.ttft.get(protocol, [])
            p50, p99 = quantile(ttft, 0.5), quantile(ttft, 0.99)
            lines.append(f"{protocol:<13}" + "".join(f"{by_kind.get(k, 0):>13}" for k in kinds)
                         + (f"{p50:>12.2f}{p99:>12.2f}" if ttft else f"{'-':>12}{'-':>12}"))
        lines += [
            f"requests {self.tally.requests} in {self.elapsed:.0f} s, {self.cfg.sessions} sessions",
            f"server errors (5xx, error events, dropped connections): {self.server_errors}; "
            f"access-log 5xx: {self.access_5xx}; server log errors: {self.log_errors}",
            f"malformed streams: {self.malformed}",
            f"forced tool calls: {self.tally.forced_called} of {self.tally.forced} answered with a call",
            f"pool at the end: {self.pool} ({'empty' if self.pool_empty else 'NOT EMPTY'})",
            *self.memory_lines(),
        ]
        return "\n".join(lines + [f"  {p}" for p in self.tally.problems])


def scan_log(text: str) -> tuple[int, int]:
    """(5xx access lines, tracebacks and ERROR lines) in a server log."""
    access = sum(int(s) >= 500 for s in re.findall(r"zllm\.access: \S+ \S+ (\d{3})", text))
    return access, len(re.findall(r"Traceback|^\S+ \S+ ERROR ", text, re.M))


# -- a server of its own --------------------------------------------------------------------


@contextmanager
def served(model: str, keys: list[str], workdir: Path, extra: list[str]) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """`zllm serve` on a free port, its log in a file (an unread pipe would block a chatty server)."""
    log = workdir / "server.log"
    cmd = [sys.executable, "-m", "zllm_core.cli", "serve", "--model", model, "--port", "0",
           "--response-store", str(workdir / "responses.sqlite3"), *extra]
    for n, key in enumerate(keys):
        cmd += ["--api-key", f"{key}:tenant{n}"]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, stderr=sink, cwd=REPO)
    try:
        deadline = time.monotonic() + 300
        while not (match := re.search(r"on (http://\S+)", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("zllm serve did not start:\n" + log.read_text()[-3000:])
            time.sleep(0.2)
        yield match.group(1), proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a running server (default: start zllm serve)")
    p.add_argument("--api-key", action="append", default=[], help="with --url: its keys (repeatable)")
    p.add_argument("--pid", type=int, help="with --url: its process, for RSS")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--tenants", type=int, default=4, help="API keys of the started server, sessions spread over them")
    p.add_argument("--trace", type=Path, default=None, help="agent trace (default: generated, see trace_replay)")
    p.add_argument("--serve-arg", action="append", default=[], help="extra `zllm serve` argument (repeatable)")
    p.add_argument("--ssd-cache-bytes", default=None,
                   help="give the started server an SSD tier of this size in the soak's temporary directory")
    defaults = SoakConfig()
    for name, value in vars(defaults).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    args = p.parse_args()
    cfg = SoakConfig(**{k: getattr(args, k) for k in vars(defaults)})
    trace = args.trace or agent_trace()
    with tempfile.TemporaryDirectory(prefix="zllm-soak-") as tmp:
        if args.url:
            report = asyncio.run(Soak(args.url, args.api_key or ["none"], args.model, trace, cfg).run(
                rss_of(args.pid) if args.pid else None))
        else:
            keys = [f"soak-key-{n}" for n in range(args.tenants)]
            ssd = ["--ssd-cache-dir", f"{tmp}/ssd", "--ssd-cache-bytes", args.ssd_cache_bytes] if args.ssd_cache_bytes else []
            with served(args.model, keys, Path(tmp), args.serve_arg + ssd) as (url, proc, log):
                report = asyncio.run(Soak(url, keys, args.model, trace, cfg).run(rss_of(proc.pid)))
                proc.send_signal(signal.SIGTERM)
                rc = proc.wait(60)
            report.access_5xx, report.log_errors = scan_log(log.read_text())
            print(f"server exit: {rc} (-15: SIGTERM, re-raised after a clean shutdown)")
    print(f"load average: {os.getloadavg()}")
    print(report.table())
    return 0 if (report.server_errors + report.malformed + report.access_5xx + report.log_errors == 0
                 and report.pool_empty) else 1


if __name__ == "__main__":
    sys.exit(main())
