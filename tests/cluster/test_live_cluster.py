"""Two CPU replicas of the demo model behind one ingress, on a local Ray cluster the server
starts and stops: conversations stay where their state is, keyless ones spread yet hit, every
protocol passes through, and a replica killed mid-stream fails its stream cleanly while the
conversation's next turn restores from the shared SSD tier on the other replica."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time

import anthropic
import httpx
import openai
from websockets.sync.client import connect

from .conftest import API_KEY, AUTH, MODEL

SYSTEM = "You are a careful coding agent. " + " ".join(f"Rule {n}: keep file {n} tidy." for n in range(40))


def chat(cluster):
    return openai.OpenAI(base_url=cluster.url + "/v1", api_key=API_KEY, max_retries=0)


def test_affinity_keeps_a_ten_turn_conversation_on_one_replica(cluster):
    """prompt_cache_key pins the conversation: every turn lands on one replica, and its cached
    tokens grow every turn."""
    before = cluster.requests()
    messages = [{"role": "system", "content": SYSTEM}]
    cached = []
    for turn in range(10):
        messages.append({"role": "user", "content": f"Step {turn}: read file {turn}."})
        reply = chat(cluster).chat.completions.create(model=MODEL, messages=messages, max_tokens=6,
                                                      temperature=0.0, prompt_cache_key="agent-10-turns")
        cached.append(reply.usage.prompt_tokens_details.cached_tokens)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    assert all(b > a for a, b in zip(cached, cached[1:])), cached
    cluster.served_by(before, 10)


def test_a_responses_chain_and_a_claude_code_session_stay_on_their_replicas(cluster):
    """previous_response_id and Anthropic's metadata.user_id are conversation ids too."""
    before = cluster.requests()
    client, previous, cached = chat(cluster), None, []
    for turn in range(4):
        r = client.responses.create(model=MODEL, input=f"{SYSTEM} Turn {turn}.", max_output_tokens=6,
                                    previous_response_id=previous)
        previous = r.id
        cached.append(r.usage.input_tokens_details.cached_tokens)
    assert all(b > a for a, b in zip(cached, cached[1:])), cached
    cluster.served_by(before, 4)
    before = cluster.requests()
    claude = anthropic.Anthropic(base_url=cluster.url, api_key=API_KEY, max_retries=0)
    messages, cached = [], []
    for turn in range(4):
        messages.append({"role": "user", "content": f"{SYSTEM} Turn {turn}."})
        m = claude.messages.create(model=MODEL, max_tokens=6, system=SYSTEM, messages=messages,
                                   metadata={"user_id": "user_abc_account__session_7f3e"})
        cached.append(m.usage.cache_read_input_tokens)
        messages.append({"role": "assistant", "content": m.content[0].text or "ok"})
    assert all(b > a for a, b in zip(cached, cached[1:])), cached
    cluster.served_by(before, 4)
    count = claude.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages)
    assert count.input_tokens > 300
    try:  # each protocol keeps its error shape through the ingress
        claude.messages.create(model="no-such-model", max_tokens=4, messages=messages)
        raise AssertionError("an unknown model was served")
    except anthropic.NotFoundError as exc:
        assert exc.body["type"] == "error" and exc.body["error"]["type"] == "not_found_error", exc.body


def test_keyless_conversations_spread_across_replicas_yet_hit(cluster):
    """Six conversations without keys, on one system prompt, run at once: past the balance
    threshold new ones go to the idler replica, and each conversation's later turns find
    their own state (the ingress's tokenizer session is their id, their prefix the evidence)."""
    before = cluster.requests()
    hits: dict[int, list[int]] = {}

    def converse(i):
        messages = [{"role": "system", "content": SYSTEM}]
        hits[i] = []
        for turn in range(3):
            messages.append({"role": "user", "content": f"Agent {i}, step {turn}: list directory {i}/{turn}."})
            reply = chat(cluster).chat.completions.create(model=MODEL, messages=messages, max_tokens=24,
                                                          temperature=0.0)
            hits[i].append(reply.usage.prompt_tokens_details.cached_tokens)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})

    threads = [threading.Thread(target=converse, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(h) == 3 and h[1] > 0 and h[2] > h[1] for h in hits.values()), hits
    grown = cluster.wait_for(lambda r: all(v["requests"] > before.get(k, 0) for k, v in r.items()) and r,
                             "both replicas to serve some of the conversations")
    assert sum(v["requests"] - before.get(k, 0) for k, v in grown.items()) == 18


def test_the_responses_websocket_and_a_fenced_tool_call_pass_through(cluster):
    ws_url = cluster.url.replace("http://", "ws://") + "/v1/responses"
    with connect(ws_url, additional_headers=AUTH) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Say hi.", "max_output_tokens": 4}))
        kinds = []
        while not kinds or kinds[-1] not in ("response.completed", "response.incomplete", "response.failed", "error"):
            kinds.append(json.loads(ws.recv(timeout=60))["type"])
    assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete", kinds  # 4 tokens: its cap
    tool = {"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    reply = chat(cluster).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Read a."}],
                                                  tools=[tool], tool_choice="required", max_tokens=48)
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "read_file" and "path" in json.loads(call.function.arguments)


def test_a_replica_killed_mid_stream_fails_cleanly_and_the_next_turn_restores_on_the_other(cluster):
    before = cluster.requests()
    messages = [{"role": "system", "content": SYSTEM}]
    for turn in range(2):
        messages.append({"role": "user", "content": f"Turn {turn}: open the log."})
        reply = chat(cluster).chat.completions.create(model=MODEL, messages=messages, max_tokens=6,
                                                      temperature=0.0, prompt_cache_key="doomed")
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    held = reply.usage.prompt_tokens + reply.usage.completion_tokens - 1
    holder = cluster.served_by(before, 2)
    _wait_written_through(cluster.ssd / "index.sqlite3", "doomed", rounds=2)
    pid = cluster.replicas()[holder]["pid"]
    messages.append({"role": "user", "content": "Turn 2: now print the whole log, line by line."})
    body = {"model": MODEL, "messages": messages, "max_tokens": 256, "stream": True, "prompt_cache_key": "doomed"}
    events = []
    with httpx.stream("POST", cluster.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                if len(events) == 3:
                    os.kill(pid, signal.SIGKILL)
    # The stream ends as Chat Completions streams end on a server error: an error chunk, then [DONE].
    assert events[-1] == "[DONE]", events[-3:]
    error = json.loads(events[-2])["error"]
    assert error["code"] == "shutting_down" and "replica" in error["message"], error
    assert all("choices" in json.loads(e) for e in events[:-2])
    # The turn again: the other replica serves it, restoring the conversation from the shared disk.
    reply = chat(cluster).chat.completions.create(model=MODEL, messages=messages, max_tokens=6,
                                                  temperature=0.0, prompt_cache_key="doomed")
    assert reply.usage.prompt_tokens_details.cached_tokens >= held // 16 * 16 - 16, reply.usage
    cluster.wait_for(lambda r: [rid for rid, v in r.items() if rid != holder and v["ssd"]["hits"]],
                     "an SSD restore on the surviving replica")
    # Ray Serve replaces the killed replica.
    cluster.wait_for(lambda r: len(r) == 2 and holder not in r, "a new replica in the killed one's place", 120)


def _wait_written_through(index, cache_id, rounds, timeout=30.0):
    """The conversation's session records are on disk, and so the blocks they name (the
    writer indexes a batch's blocks before its records, and write-through queues them first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sqlite3.connect(index, timeout=10) as db:
            if db.execute("SELECT COUNT(*) FROM sessions WHERE cache_id = ?", (cache_id,)).fetchone()[0] >= rounds:
                return
        time.sleep(0.1)
    raise AssertionError(f"{cache_id} was not written through to {index}")
