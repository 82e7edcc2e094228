"""The SSD tier through HTTP: a conversation pushed out of a small device cache is restored from
disk on its next turn, survives a restart, and a kill -9 mid-write costs at most a miss."""
import random
import threading

import httpx
import openai
import pytest

from .conftest import API_KEY, MODEL, start_server

KV_BYTES = str(16 << 20)  # 256 blocks of the demo model: two of these conversations at a time


def conversation(i):
    rules = " ".join(f"Rule {i}.{n}: file {n} of project {i} stays tidy." for n in range(110))
    return [{"role": "system", "content": f"You are agent {i}. {rules}"},
            {"role": "user", "content": f"Start task {i}."}]


def ask(server, messages, max_tokens=4):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens,
                                           temperature=0.0)
    return reply.choices[0].message.content or "", reply.usage.prompt_tokens_details.cached_tokens


def ssd_metrics(server):
    return httpx.get(server.url + "/metrics.json", timeout=10).json()["ssd"]


@pytest.fixture
def ssd_server(tmp_path):
    servers = []

    def start():
        servers.append(start_server(tmp_path / "responses.sqlite3", "--kv-cache-bytes", KV_BYTES,
                                    "--ssd-cache-dir", str(tmp_path / "ssd")))
        return servers[-1]
    yield start
    for s in servers:
        if s.process.poll() is None:
            s.stop()


def test_a_pushed_out_conversation_hits_the_ssd_tier_and_survives_a_restart(ssd_server):
    server = ssd_server()
    first = conversation(0)
    reply, _ = ask(server, first)
    for other in range(1, 4):  # each about 1,700 tokens: the first conversation is evicted
        ask(server, conversation(other))
    turn2 = first + [{"role": "assistant", "content": reply}, {"role": "user", "content": "Go on."}]
    reply2, cached = ask(server, turn2)
    assert cached >= 1024 and ssd_metrics(server)["hits"] >= 1
    prom = httpx.get(server.url + "/metrics", timeout=10).text
    assert "zllm_ssd_cache_hits_total" in prom and "zllm_ssd_cache_written_bytes_total" in prom
    server.stop()  # SIGTERM: resident blocks are backed up before exit

    restarted = ssd_server()
    turn3 = turn2 + [{"role": "assistant", "content": reply2}, {"role": "user", "content": "And then?"}]
    _, cached = ask(restarted, turn3)
    assert cached >= 1024 and ssd_metrics(restarted)["hits"] == 1


def test_kill_9_during_snapshot_writing_costs_at_most_a_miss(ssd_server):
    """A few rounds with the real server (the store's own 50-round test kills a writer process):
    after each restart every answer equals the reference and the server keeps serving."""
    rng = random.Random(7)
    prompts = [conversation(10 + i) for i in range(4)]
    reference = {}
    for round_ in range(3):
        server = ssd_server()
        for i in rng.sample(range(len(prompts)), len(prompts)):
            text, _ = ask(server, prompts[i], max_tokens=8)
            assert reference.setdefault(i, text) == text
        # Evictions keep the writer busy while the kill lands.
        busy = threading.Thread(target=lambda: [_ignore_errors(ask, server, conversation(100 + round_ * 4 + j))
                                                for j in range(4)], daemon=True)
        busy.start()
        threading.Event().wait(rng.uniform(0.5, 3.0))
        server.process.kill()
        server.process.wait()
        busy.join()
    server = ssd_server()
    for i in range(len(prompts)):
        assert ask(server, prompts[i], max_tokens=8)[0] == reference[i]
    ssd = ssd_metrics(server)
    assert ssd["hits"] >= 1 and ssd["quarantined"] == 0  # commits are atomic: nothing to quarantine
    assert "Traceback" not in server.log.read_text()


def _ignore_errors(fn, *args):
    try:
        fn(*args)
    except (openai.APIError, httpx.HTTPError):
        pass  # the server was killed mid-request
