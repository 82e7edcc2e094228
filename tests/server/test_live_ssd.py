"""The SSD tier through HTTP: a conversation pushed out of a small device cache is restored from
disk on its next turn, survives a restart, and a kill -9 mid-write costs at most a miss."""
import math
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from .conftest import API_KEY, MODEL, start_server

KV_BYTES = str(16 << 20)  # 256 blocks of the demo model: two of these conversations at a time
CRASH_ROUNDS = 50
CRASH_KV_BYTES = str(2 << 20)  # 32 blocks: each crash conversation evicts most of the one before
CRASH_SSD_BYTES = str(32 << 20)  # about 14 blobs: the budget drops old ones as the rounds go


def conversation(i, rules=110):
    rules = " ".join(f"Rule {i}.{n}: file {n} of project {i} stays tidy." for n in range(rules))
    return [{"role": "system", "content": f"You are agent {i}. {rules}"},
            {"role": "user", "content": f"Start task {i}."}]


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


def ask(server, messages, max_tokens=4):
    reply = client(server).chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens,
                                                   temperature=0.0)
    return reply.choices[0].message.content or "", reply.usage.prompt_tokens_details.cached_tokens


def prompt_tokens(server, messages):
    return client(server).chat.completions.create(model=MODEL, messages=messages, max_tokens=1,
                                                  temperature=0.0).usage.prompt_tokens


def first_token(server, messages):
    """The first output token's top-5 logprobs, and how many prompt tokens came from a cache."""
    reply = client(server).chat.completions.create(model=MODEL, messages=messages, max_tokens=1, temperature=0.0,
                                                   logprobs=True, top_logprobs=5)
    top = reply.choices[0].logprobs.content[0].top_logprobs
    return [(t.token, t.logprob) for t in top], reply.usage.prompt_tokens_details.cached_tokens


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
    turn2_tokens = prompt_tokens(server, turn2)
    prom = httpx.get(server.url + "/metrics", timeout=10).text
    assert "zllm_ssd_cache_hits_total" in prom and "zllm_ssd_cache_written_bytes_total" in prom
    server.stop()  # SIGTERM: resident blocks are backed up before exit

    restarted = ssd_server()
    turn3 = turn2 + [{"role": "assistant", "content": reply2}, {"role": "user", "content": "And then?"}]
    _, cached = ask(restarted, turn3)
    # All of turn 2 (its last blocks were only resident when the server stopped), not just the
    # first conversation that eviction had written: at most its partial last block is missing.
    assert cached > turn2_tokens - 16 and ssd_metrics(restarted)["hits"] == 1


def test_kill_9_during_heavy_snapshot_writing_costs_at_most_a_miss(tmp_path):
    """50 rounds, in two lanes of 25 on their own directories (a server's start is mostly
    single-threaded imports: two lanes keep both cores busy). A round: new conversations keep
    the server evicting, so its snapshot writer busy; kill -9 lands at a random moment of a
    blob's commit; a server restarted on the same --ssd-cache-dir is asked again what the
    killed ones answered. Every answer equals its full prefill's (restored from disk, or a
    miss), nothing is quarantined or fails to restore, and every restart serves."""
    lanes = [(tmp_path / f"lane{n}", random.Random(22 + n)) for n in range(2)]
    with ThreadPoolExecutor(len(lanes)) as pool:
        counts = [f.result() for f in [pool.submit(_crash_lane, d, rng, CRASH_ROUNDS // 2) for d, rng in lanes]]
    asked, hits, orphans = map(sum, zip(*counts))
    assert hits >= asked // 3 and orphans > 0, counts  # restores were tested; kills hit commits
    print(f"{CRASH_ROUNDS} kills: {hits} of {asked} answers restored from disk, {orphans} orphans collected")


def _crash_lane(directory, rng, rounds):
    """``rounds`` kills on one --ssd-cache-dir; (answers checked, of them restored, orphans)."""
    reference = {}  # conversation -> its first token's top logprobs, from a full prefill
    asked = hits = orphans = 0
    directory.mkdir()
    for round_ in range(rounds + 1):
        server = start_server(directory / "responses.sqlite3", "--kv-cache-bytes", CRASH_KV_BYTES,
                              "--ssd-cache-dir", str(directory / "ssd"), "--ssd-cache-bytes", CRASH_SSD_BYTES)
        try:
            # The killed server's last three answers: the third last was all on disk, the other two
            # were being evicted (written) or still resident when the kill landed; and one before.
            latest = [c for c in reference if c[0] == round_ - 1][-3:]
            older = [c for c in reference if c[0] == round_ - 2]
            probes = latest + rng.sample(older, min(1, len(older)))
            restored = 0
            for c in probes:
                top, cached = first_token(server, crash_conversation(c))
                assert same_logprobs(top, reference[c]), f"{directory.name} round {round_}: {c} changed"
                restored += cached > 0  # a fresh server: only the SSD tier holds anything
            served = httpx.get(server.url + "/metrics.json", timeout=10).json()
            ssd, lookups = served["ssd"], served["cache"]["lookups"]
            assert ssd["quarantined"] == ssd["failed_restores"] == 0  # commits are atomic
            assert (ssd["hits"], lookups.get("cold", 0)) == (restored, len(probes) - restored)  # misses counted
            asked, hits, orphans = asked + len(probes), hits + restored, orphans + ssd["orphans_collected"]
            if round_ < rounds:
                reference.update(_write_until_killed(server, directory / "ssd" / "blobs", round_, rng))
        finally:
            if server.process.poll() is None:
                server.stop()
        assert "Traceback" not in server.log.read_text()
    return asked, hits, orphans


def _write_until_killed(server, blobs, round_, rng):
    """Kill the server at a random moment of a blob's commit while new conversations keep it
    evicting; their answers (full prefills: nothing of a new conversation is cached)."""
    answers = {}
    writing = threading.Thread(target=_ask_new, args=(server, round_, answers), daemon=True)
    writing.start()
    time.sleep(rng.uniform(0.3, 1.0))
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and not any(n.endswith(".tmp") for n in os.listdir(blobs)):
        time.sleep(0.0002)  # until a blob is being written
    time.sleep(rng.uniform(0.0, 0.005))  # its write, fsync, rename, index rows, budget drops
    assert server.process.poll() is None
    server.process.kill()
    server.process.wait()
    writing.join()
    assert all(cached == 0 for _, cached in answers.values())
    return {c: top for c, (top, _) in answers.items()}


def _ask_new(server, round_, answers):
    for j in range(1000):
        try:
            answers[(round_, j)] = first_token(server, crash_conversation((round_, j)))
        except (openai.APIError, httpx.HTTPError):
            return  # the server was killed mid-request


def crash_conversation(c):
    return conversation(f"{c[0]}-{c[1]}", rules=14)  # about 300 tokens, 19 blocks


def same_logprobs(top, expected):
    return [t for t, _ in top] == [t for t, _ in expected] and all(
        math.isclose(a, b, abs_tol=1e-4) for (_, a), (_, b) in zip(top, expected))
