"""What a new user hits in the first hour: the request log, Prometheus metrics, JSON bodies
whatever their content-type, invalid tool schemas, tool_choice naming an undeclared tool, and
the Responses echo of truncation and sampling values. All through the real server."""
import json
import time

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import API_KEY, MODEL

USER = [{"role": "user", "content": "hi"}]
BAD_SCHEMA = {"type": "objekt", "properties": {"x": {"type": "string"}}}


def test_access_log_has_one_line_per_request_with_tokens_and_timing(server, openai_client):
    r = openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3)
    httpx.get(server.url + "/v1/models", headers={"authorization": f"Bearer {API_KEY}"})
    u = r.usage
    expected = (f"POST /v1/chat/completions 200 in={u.prompt_tokens} out={u.completion_tokens} "
                f"cached={u.prompt_tokens_details.cached_tokens} ttft=")
    deadline = time.monotonic() + 10  # a line is written once its response has been sent
    while time.monotonic() < deadline:
        lines = [line for line in server.log.read_text().splitlines() if "zllm.access" in line]
        if any(expected in line for line in lines) and any("GET /v1/models 200" in line for line in lines):
            return
        time.sleep(0.05)
    pytest.fail(f"no access line {expected!r} in the server log")


def test_metrics_are_prometheus_text_with_the_serving_figures(server, openai_client):
    openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3, stream=False)
    r = httpx.get(server.url + "/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    for name in ("zllm_time_to_first_token_seconds", "zllm_inter_token_latency_seconds",
                 "zllm_requests_waiting", "zllm_prefix_cache_token_hit_rate", "zllm_prefix_cache_lookups",
                 "zllm_prefix_cache_near_misses", "zllm_prefix_cache_evictions", "zllm_tokenizer_calls",
                 "zllm_tokenizer_shadow_checked", "zllm_kv_blocks", "zllm_spec_draft_tokens",
                 "zllm_spec_acceptance_rate"):
        assert name in families, name
    ttft = {s.name: s.value for s in families["zllm_time_to_first_token_seconds"].samples}
    assert ttft["zllm_time_to_first_token_seconds_count"] >= 1
    paths = {s.labels["path"] for s in families["zllm_tokenizer_calls"].samples}
    assert {"cold", "repairs", "fallbacks"} <= paths
    assert "blocks" in httpx.get(server.url + "/metrics.json").json()  # the JSON view stays


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_json_body_is_read_as_json_whatever_its_content_type(server, content_type):
    headers = {"authorization": f"Bearer {API_KEY}"}
    if content_type:
        headers["content-type"] = content_type
    body = json.dumps({"model": MODEL, "messages": USER, "max_tokens": 2}).encode()
    r = httpx.post(server.url + "/v1/chat/completions", content=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "chat.completion"


def test_invalid_tool_schema_is_a_400_naming_tool_and_keyword_in_all_three(openai_client, anthropic_client):
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2, tools=[
            {"type": "function", "function": {"name": "g", "parameters": BAD_SCHEMA}}])
    assert e.value.body["param"] == "tools[0].function.parameters"
    assert "'g'" in e.value.message and "type" in e.value.message and "objekt" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.responses.create(model=MODEL, input="hi", max_output_tokens=2, tools=[
            {"type": "function", "name": "ok", "parameters": {"type": "object"}},
            {"type": "function", "name": "g", "parameters": BAD_SCHEMA}])
    assert e.value.body["param"] == "tools[1].parameters" and "'g'" in e.value.message
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_client.messages.create(model=MODEL, max_tokens=2, messages=USER, tools=[
            {"name": "g", "input_schema": BAD_SCHEMA}])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "tools[0].input_schema" in e.value.message and "'g'" in e.value.message
    with pytest.raises(anthropic.BadRequestError):  # count_tokens takes the same tools
        anthropic_client.messages.count_tokens(model=MODEL, messages=USER, tools=[
            {"name": "g", "input_schema": {"type": "object", "required": "x"}}])


def test_tool_choice_naming_an_undeclared_tool_is_a_400_in_all_three(openai_client, anthropic_client):
    tool = {"name": "f", "parameters": {"type": "object"}}
    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2,
                                              tools=[{"type": "function", "function": tool}],
                                              tool_choice={"type": "function", "function": {"name": "g"}})
    with pytest.raises(openai.BadRequestError):
        openai_client.responses.create(model=MODEL, input="hi", max_output_tokens=2,
                                       tools=[{"type": "function", **tool}],
                                       tool_choice={"type": "function", "name": "g"})
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_client.messages.create(model=MODEL, max_tokens=2, messages=USER,
                                         tools=[{"name": "f", "input_schema": {"type": "object"}}],
                                         tool_choice={"type": "tool", "name": "g"})
    assert "'g'" in e.value.message


def test_truncated_response_marks_its_message_incomplete_and_echoes_sampling(openai_client):
    r = openai_client.responses.create(model=MODEL, input="Write a long story.", max_output_tokens=2,
                                       temperature=0.7, top_p=0.9)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert [item.status for item in r.output] == ["incomplete"]
    assert (r.temperature, r.top_p) == (0.7, 0.9)
    defaults = openai_client.responses.create(model=MODEL, input="hi", max_output_tokens=2)
    assert (defaults.temperature, defaults.top_p) == (1.0, 1.0)  # the values used, not null
    with openai_client.responses.stream(model=MODEL, input="Write a long story.", max_output_tokens=2) as s:
        done = [ev.item.status for ev in s if ev.type == "response.output_item.done"]
    assert done == ["incomplete"]
