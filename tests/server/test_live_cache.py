"""The prefix cache seen through the server: an agent loop's cached tokens grow every turn,
and a fork in the re-rendered history shows up in the near-miss log; /metrics counts it all."""
import httpx

from .conftest import MODEL
from .shapes import WEATHER

# ~2K tokens of instructions, as agents send: enough for the near-miss threshold (1,024).
SYSTEM = "You are a coding agent. " + " ".join(f"Rule {i}: keep file {i} tidy and tested." for i in range(200))


def ask(client, messages):
    reply = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[{"type": "function", "function": WEATHER}],
        max_tokens=4, temperature=0.0)
    return reply, reply.usage.prompt_tokens_details.cached_tokens


def test_agent_loop_caches_more_every_turn(openai_client):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Start the task."}]
    cached = []
    for turn in range(4):
        reply, hit = ask(openai_client, messages)
        cached.append(hit)
        messages += [{"role": "assistant", "content": reply.choices[0].message.content or ""},
                     {"role": "user", "content": f"Tool output for step {turn}: all {turn} checks passed."}]
    assert cached[0] < cached[1] < cached[2] < cached[3]
    assert cached[1] >= reply.usage.prompt_tokens // 2


def test_a_forked_history_is_logged_as_a_near_miss(server, openai_client):
    history = [{"role": "system", "content": SYSTEM},
               {"role": "user", "content": "Explain the build. " * 40}]
    ask(openai_client, history)
    # The same conversation re-serialized with one changed character near its end: most
    # of the resident prefix is shared, the rest forks -- what a template or tool-echo
    # mismatch looks like.
    forked = [history[0], {"role": "user", "content": "Explain the build. " * 39 + "Explain the build! "}]
    _, hit = ask(openai_client, forked)
    assert hit > 1024
    log = server.log.read_text()
    assert "near-miss" in log and "Explain the build!" in log


def test_metrics_count_a_repeated_prompt_as_cached(server, openai_client):
    before = httpx.get(server.url + "/metrics.json", timeout=10).json()  # open, like /health
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Metrics, please."}]
    ask(openai_client, history)
    _, hit = ask(openai_client, history)
    after = httpx.get(server.url + "/metrics.json", timeout=10).json()
    cache, blocks = after["cache"], after["blocks"]
    assert hit > 0 and cache["cached_tokens"] - before["cache"]["cached_tokens"] >= hit
    assert cache["requests"] - before["cache"]["requests"] == 2
    assert sum(cache["lookups"].values()) > sum(before["cache"]["lookups"].values())
    assert 0 < cache["token_hit_rate"] <= 1 and cache["indexed_blocks"] > 0
    assert blocks["free"] + blocks["used"] == blocks["total"] and blocks["allocated_bytes"] > 0
    assert after["requests_running"] == after["requests_waiting"] == 0
    assert isinstance(after["num_preemptions"], int) and isinstance(cache["evictions"], int)


def test_a_resent_conversation_is_tokenized_incrementally(server, openai_client):
    import httpx

    before = httpx.get(server.url + "/metrics.json").json()["tokenizer"]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Go on."}]
    for turn in range(3):
        reply, _ = ask(openai_client, messages)
        messages += [{"role": "assistant", "content": reply.choices[0].message.content or ""},
                     {"role": "user", "content": f"Step {turn} done."}]
    after = httpx.get(server.url + "/metrics.json").json()["tokenizer"]
    delta = {k: after[k] - before[k] for k in ("calls", "repairs", "exact_hits")}
    # Turns 2 and 3 continue turn 1's tokens: the recorded answer's exact ids where it was
    # resent verbatim (exact_spans.py), else a repair splicing onto them.
    assert delta["calls"] + delta["exact_hits"] == 3
    assert delta["repairs"] + delta["exact_hits"] >= 2
