"""One eviction clock for a conversation's state, through the real server (issue 21, item 3).

The real app under uvicorn, the real engine and demo model, the official OpenAI SDK. Each
answer is forced by a logits hook into non-canonical tokens (tests/server/test_exact_history.py),
so whether a resent answer kept its exact ids shows in the next prompt. The budget is set from
a measured conversation, so the checks do not depend on how big one happens to be.
"""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import httpx
import openai
import pytest

from tests.server.in_process import serving
from tests.server.test_exact_history import ScriptedEngine, non_canonical
from zllm_core.engine.async_engine import AsyncEngine
from zllm_core.model.model_names import resolve_model
from zllm_core.protocols import openai_chat
from zllm_core.server.app import create_app
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.runtime import ServerConfig

MODEL = "zllm-demo"


@dataclass
class PausingEngine(ScriptedEngine):
    """ScriptedEngine whose next request, when `pause` is set, waits before its first event
    until `pause` is cleared: a request held in flight."""

    pause: threading.Event | None = None
    paused: threading.Event | None = None

    async def generate(self, prompt_ids, params, request_id=None, cache=None):
        hold, self.pause = self.pause, None
        async for event in super().generate(prompt_ids, params, request_id, cache):
            if hold is not None:
                self.paused.set()
                await asyncio.to_thread(hold.wait)
                hold = None
            yield event


@pytest.fixture(scope="module")
def live():
    model_dir = resolve_model(MODEL)
    engine = PausingEngine(AsyncEngine.from_model(str(model_dir)))
    prompts = PromptBuilder.from_model_dir(model_dir, engine.tokenizer)
    with serving(create_app(engine, prompts, ServerConfig(model_name=MODEL))) as url:
        yield engine, prompts, url
    engine.engine.shutdown()


def system(name: str) -> str:
    """A conversation's own instructions, all of one length."""
    return f"[{name}] " + " ".join(f"Rule {i}: keep {name} file {i} tidy." for i in range(120))


def turn(live, name: str, history: list[dict]) -> str:
    engine, _, url = live
    engine.script.append(non_canonical(engine.tokenizer, len(history)))
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": system(name)}, *history], temperature=0.0,
        extra_body={"prompt_cache_key": name})
    return reply.choices[0].message.content


def lookups(url: str) -> dict[str, int]:
    return httpx.get(url + "/metrics.json").json()["cache"]["lookups"]


def holds(prompts: PromptBuilder, name: str) -> dict[str, int]:
    """Bytes the clock charges `name`'s conversation, by kind (its key names it, no tenant)."""
    charged: dict[str, int] = {}
    for h in prompts.clock.holds(("", name)):
        charged[h.kind] = charged.get(h.kind, 0) + h.nbytes
    return charged


def budget(prompts: PromptBuilder, name: str, conversations: float) -> None:
    """A budget of so many conversations the size of `name`'s."""
    prompts.clock.budget_bytes = int(sum(holds(prompts, name).values()) * conversations)


def test_an_evicted_conversation_loses_all_its_state_and_its_resend_is_still_exact(live):
    engine, prompts, url = live
    ask = [{"role": "user", "content": "Step 0: run the checks."}]
    answer = turn(live, "alpha", ask)
    assert set(holds(prompts, "alpha")) == {"memo", "render", "tokenizer", "terminal"}
    budget(prompts, "alpha", 1.5)  # alpha fits, alpha and beta do not
    turn(live, "beta", ask)
    assert holds(prompts, "alpha") == {} and set(holds(prompts, "beta")) == {"memo", "render", "tokenizer", "terminal"}
    assert prompts.clock.stats.bytes <= prompts.clock.budget_bytes

    tokens = prompts.tokens.stats
    memo, full, cold, exact, by_id = (openai_chat.MESSAGES.hits, prompts.renderer.stats.full, tokens.cold,
                                      prompts.conversations.stats.hits, lookups(url).get("exact_id", 0))
    turn(live, "alpha", [*ask, {"role": "assistant", "content": answer}, {"role": "user", "content": "Step 1."}])
    # Everything alpha kept went together: its validated messages, its render, its tokenizer
    # session and the exact ids of its answer, and the cache's terminal state under its id
    # (found now by its blocks' keys).
    assert openai_chat.MESSAGES.hits == memo and prompts.renderer.stats.full == full + 1 and tokens.cold == cold + 1
    assert prompts.conversations.stats.hits == exact and lookups(url).get("exact_id", 0) == by_id
    # The resend falls back to re-tokenizing: the prompt is the canonical encoding of its text.
    prompt = engine.turns[-1].prompt.tolist()
    tok = engine.tokenizer
    assert tok.encode(tok.decode(prompt), allowed_special="all") == prompt
    assert tok.decode(prompt).count(answer) == 1


def test_a_conversation_with_a_request_running_is_not_evicted(live):
    engine, prompts, url = live
    ask = [{"role": "user", "content": "Step 0: look around."}]
    answer = turn(live, "gamma", ask)
    budget(prompts, "gamma", 1.5)
    engine.pause, engine.paused = threading.Event(), threading.Event()
    release = engine.pause
    running = threading.Thread(target=turn, args=(live, "delta", ask))
    running.start()
    try:
        assert engine.paused.wait(30)
        # Over the budget: the least recently used go, gamma then epsilon; delta, older than
        # both but running, stays.
        turn(live, "epsilon", ask)
        turn(live, "zeta", ask)
        assert set(holds(prompts, "delta")) == {"memo", "render", "tokenizer"}
        assert holds(prompts, "gamma") == holds(prompts, "epsilon") == {}
        assert prompts.clock.stats.bytes > prompts.clock.budget_bytes - holds(prompts, "zeta")["terminal"]
    finally:
        prompts.clock.budget_bytes = 1 << 40  # nothing is evicted as it ends: its state is looked at
        release.set()
        running.join(30)
    # Its answer was recorded into the state it kept: the next turn's prompt has its exact ids.
    assert set(holds(prompts, "delta")) == {"memo", "render", "tokenizer", "terminal"}
    hits = prompts.conversations.stats.hits
    turn(live, "delta", [*ask, {"role": "assistant", "content": answer}, {"role": "user", "content": "Next."}])
    assert prompts.conversations.stats.hits == hits + 1


def test_the_budget_bounds_the_real_bytes_of_the_stores(live):
    _, prompts, _ = live
    ask = [{"role": "user", "content": "Step 0: summarise."}]
    turn(live, "eta", ask)
    budget(prompts, "eta", 2.5)
    evictions = prompts.clock.stats.evictions
    names = ["theta", "iota", "kappa", "lambda"]
    for name in names:
        turn(live, name, ask)
        charged: dict[str, int] = {}
        for other in NAMES:
            for kind, n in holds(prompts, other).items():
                charged[kind] = charged.get(kind, 0) + n
        assert sum(charged.values()) == prompts.clock.stats.bytes <= prompts.clock.budget_bytes
        # The tokenizer holds exactly the sessions the clock charges for, at their size.
        assert prompts.tokens.store.stats.bytes == charged["tokenizer"]
    assert prompts.clock.stats.evictions - evictions >= 2


NAMES = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda")
