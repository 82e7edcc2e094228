"""Limits a user sets and the server enforces: generations per API key at once, requests
waiting beyond them (a 429 with retry-after past that), and a request time limit.

The real engine, app, uvicorn and SDK clients; the engine's steps are held at a gate (a
logits hook that waits) so requests stay running, holding their tenant's slots, for exactly as
long as a test needs.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import anthropic
import openai
import pytest

from tests.server.in_process import serving
from zllm_core.engine.async_engine import AsyncEngine
from zllm_core.model.model_names import resolve_model
from zllm_core.server.app import create_app
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.runtime import ServerConfig
from zllm_core.server.tenant_limits import TenantQuota

MODEL = "zllm-demo"
KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}
FORCED = 64  # the token every step is forced to: no early end of turn, whatever the weights


class GatedEngine:
    """The real AsyncEngine; each request's first `free_steps` tokens run, then the engine
    thread waits at the gate until the test opens it."""

    def __init__(self, engine: AsyncEngine):
        self.engine, self.opened, self.free_steps = engine, threading.Event(), 0

    def __getattr__(self, name):
        return getattr(self.engine, name)

    async def generate(self, prompt_ids, params, request_id=None, cache=None):
        hooked = replace(params, logits_hook=self._hook(len(prompt_ids)))
        async for event in self.engine.generate(prompt_ids, hooked, request_id, cache):
            yield event

    def _hook(self, prompt_len: int):
        def hook(tokens, row):
            if len(tokens) - prompt_len >= self.free_steps:
                self.opened.wait(60)
            row.fill_(float("-inf"))
            row[FORCED] = 0.0
        return hook

    def drained(self) -> bool:
        self.opened.set()
        for _ in range(500):
            if self.engine.engine.kv.pool.is_empty() and not self.engine.engine.has_unfinished():
                return True
            time.sleep(0.01)
        return False


@pytest.fixture(scope="module")
def engine():
    model_dir = resolve_model(MODEL)
    gated = GatedEngine(AsyncEngine.from_model(str(model_dir)))
    gated.prompts = PromptBuilder.from_model_dir(model_dir, gated.tokenizer)
    yield gated
    gated.opened.set()
    gated.engine.shutdown()


def _served(engine, **config):
    app = create_app(engine, engine.prompts, ServerConfig(model_name=MODEL, api_keys=KEYS, **config))
    return app, serving(app)


@pytest.fixture(scope="module")
def limited(engine):
    app, server = _served(engine, tenant_quota=TenantQuota(max_running=2, max_queued=1))
    with server as url:
        yield app.state.runtime.generation.tenants, url


@pytest.fixture(scope="module")
def timed(engine):
    app, server = _served(engine, request_timeout=1.5)
    with server as url:
        yield url


@pytest.fixture
def gate(engine):
    engine.opened.clear()
    engine.free_steps = 0
    yield engine
    assert engine.drained(), "requests were left in the engine"


@pytest.fixture
def pool(gate):
    """Threads for blocking SDK calls; the gate opens before they are joined, so a failing
    test fails instead of waiting on requests held at the gate."""
    threads = ThreadPoolExecutor(4)
    yield threads
    gate.opened.set()
    threads.shutdown()


def chat(url, key, **kw):
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=4, **kw)


def message(url, key, **kw):
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    return client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "hi"}], **kw)


def response(url, key):
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    return client.responses.create(model=MODEL, input="hi", max_output_tokens=16)


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_key_runs_its_share_waits_in_its_queue_and_is_refused_past_it(limited, gate, pool):
    tenants, url = limited
    running = [pool.submit(chat, url, "key-a") for _ in range(2)]
    wait_for(lambda: tenants.counts("tenant-a") == (2, 0), "two running")
    queued = pool.submit(message, url, "key-a")
    wait_for(lambda: tenants.counts("tenant-a") == (2, 1), "one queued")
    other = pool.submit(chat, url, "key-b")  # another key has slots of its own
    wait_for(lambda: tenants.counts("tenant-b") == (1, 0), "the other key running")

    with pytest.raises(openai.RateLimitError) as chat_refusal:
        chat(url, "key-a")
    with pytest.raises(anthropic.RateLimitError) as messages_refusal:
        message(url, "key-a")
    with pytest.raises(openai.RateLimitError) as responses_refusal:
        response(url, "key-a")

    gate.opened.set()
    assert [f.result(timeout=60).choices[0].finish_reason for f in running] == ["length"] * 2
    assert queued.result(timeout=60).stop_reason == "max_tokens"
    assert other.result(timeout=60).choices[0].finish_reason == "length"
    for refusal in (chat_refusal, responses_refusal):
        body = refusal.value.response.json()["error"]
        assert (body["type"], body["code"]) == ("rate_limit_error", "rate_limit_exceeded")
        assert "1 waiting" in body["message"]
    assert messages_refusal.value.response.json()["error"]["type"] == "rate_limit_error"
    for refusal in (chat_refusal, messages_refusal, responses_refusal):
        assert int(refusal.value.response.headers["retry-after"]) >= 1
    assert tenants.counts("tenant-a") == tenants.counts("tenant-b") == (0, 0)


def test_a_client_that_leaves_while_queued_frees_its_place(limited, gate, pool):
    tenants, url = limited
    running = [pool.submit(chat, url, "key-a") for _ in range(2)]
    wait_for(lambda: tenants.counts("tenant-a") == (2, 0), "two running")
    client = openai.OpenAI(base_url=url + "/v1", api_key="key-a", max_retries=0, timeout=0.5)
    with pytest.raises(openai.APITimeoutError):  # the client gives up while queued
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    wait_for(lambda: tenants.counts("tenant-a") == (2, 0), "the queued place freed")
    queued = pool.submit(chat, url, "key-a")  # so the queue has room again
    wait_for(lambda: tenants.counts("tenant-a") == (2, 1), "queued again")
    gate.opened.set()
    assert all(f.result(timeout=60).choices for f in [*running, queued])
    assert tenants.counts("tenant-a") == (0, 0)


def test_a_request_past_its_time_limit_is_a_504_in_each_protocol(timed, gate):
    with pytest.raises(openai.InternalServerError) as chat_timeout:
        chat(timed, "key-a")
    with pytest.raises(anthropic.InternalServerError) as messages_timeout:
        message(timed, "key-a")
    assert chat_timeout.value.status_code == messages_timeout.value.status_code == 504
    body = chat_timeout.value.response.json()["error"]
    assert (body["type"], body["code"]) == ("timeout_error", "timeout")
    assert "1.5 seconds" in body["message"]
    assert messages_timeout.value.response.json()["error"]["type"] == "timeout_error"


def test_a_stream_past_its_time_limit_ends_with_the_protocols_error_event(timed, gate):
    gate.free_steps = 2  # the stream starts, then stalls
    client = openai.OpenAI(base_url=timed + "/v1", api_key="key-a", max_retries=0)
    chunks = []
    with pytest.raises(openai.APIError, match="time limit"):
        for chunk in client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, stream=True):
            chunks.append(chunk)
    assert chunks, "the stream had started before the limit"
    claude = anthropic.Anthropic(base_url=timed, api_key="key-a", max_retries=0)
    with pytest.raises(anthropic.APIStatusError, match="time limit"):
        with claude.messages.stream(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]) as s:
            for _ in s:
                pass
