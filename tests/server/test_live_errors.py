"""Bad requests get each protocol's own error shape, naming the field, and never a 500."""
import json
import time

import httpx
import pytest

from .conftest import API_KEY, MAX_BODY_BYTES, MAX_MODEL_LEN, MODEL

AUTH = {"authorization": f"Bearer {API_KEY}"}
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"


def post(server, path, body, headers=AUTH):
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(server.url + path, content=content, timeout=60,
                      headers={"content-type": "application/json", **headers})


def openai_error(r, status):
    assert r.status_code == status, r.text
    return r.json()["error"]


def anthropic_error(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error"
    return body["error"]


USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("body,param", [
    ({"messages": USER}, "model"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    ({"model": MODEL, "messages": USER, "max_tokens": "many"}, "max_tokens"),
    ({"model": MODEL, "messages": USER, "temperature": 9}, "temperature"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]},
     "messages[0].content[0]"),
])
def test_chat_field_errors_name_the_field(server, body, param):
    err = openai_error(post(server, CHAT, body), 400)
    assert err["param"] == param and param in err["message"]


def test_malformed_json_is_a_400_in_each_shape(server):
    assert openai_error(post(server, CHAT, b"{nope"), 400)["code"] == "invalid_json"
    assert anthropic_error(post(server, MESSAGES, b"[1,"), 400)["type"] == "invalid_request_error"
    assert openai_error(post(server, "/v1/responses", b"42"), 400)


def test_unknown_model_is_404(server):
    err = openai_error(post(server, CHAT, {"model": "gpt-nope", "messages": USER}), 404)
    assert err["code"] == "model_not_found"
    err = anthropic_error(post(server, MESSAGES, {"model": "claude-nope", "max_tokens": 4,
                                                  "messages": USER}), 404)
    assert err["type"] == "not_found_error"


def test_missing_or_wrong_key_is_401(server):
    assert openai_error(post(server, CHAT, {}, headers={}), 401)
    assert anthropic_error(post(server, MESSAGES, {}, headers={"x-api-key": "wrong"}), 401)[
        "type"] == "authentication_error"
    assert httpx.get(server.url + "/v1/models").status_code == 401


def test_anthropic_errors_name_the_field(server):
    err = anthropic_error(post(server, MESSAGES, {"model": MODEL, "messages": USER}), 400)
    assert "max_tokens" in err["message"]
    err = anthropic_error(post(server, MESSAGES, {"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}]}), 400)
    assert "messages[0].content[0]" in err["message"]


def test_over_long_prompt_is_rejected_before_the_engine(server):
    long = "word " * (MAX_MODEL_LEN * 2)
    err = openai_error(post(server, CHAT, {"model": MODEL, "messages": [
        {"role": "user", "content": long}]}), 400)
    assert err["code"] == "context_length_exceeded"
    assert anthropic_error(post(server, MESSAGES, {"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "user", "content": long}]}), 400)


def test_oversized_body_is_413(server):
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * MAX_BODY_BYTES}]}
    assert openai_error(post(server, CHAT, big), 413)


def chunked(data: bytes):
    # A generator body: httpx sends it chunked, without a content-length to check up front.
    step = 1 << 16
    for i in range(0, len(data), step):
        yield data[i:i + step]


def test_oversized_chunked_body_is_413_in_each_shape(server):
    big = json.dumps({"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "user", "content": "x" * MAX_BODY_BYTES}]}).encode()
    for path in (CHAT, MESSAGES):
        r = httpx.post(server.url + path, content=chunked(big), timeout=60,
                       headers={"content-type": "application/json", **AUTH})
        assert "content-length" not in r.request.headers
        if path == CHAT:
            assert "exceeds the limit" in openai_error(r, 413)["message"]
        else:
            assert anthropic_error(r, 413)["type"] == "request_too_large"


def test_unknown_response_is_404(server):
    r = httpx.get(server.url + "/v1/responses/resp_nope", headers=AUTH)
    assert openai_error(r, 404)["code"] == "not_found"


def test_a_client_that_disconnects_mid_stream_frees_its_request(server):
    body = {"model": MODEL, "stream": True, "max_tokens": 64, "messages": USER, "temperature": 0,
            "stop": ["never-appears"]}
    with httpx.stream("POST", server.url + CHAT, json=body, headers=AUTH, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                break  # one chunk, then hang up
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if httpx.get(server.url + "/health").json()["requests_running"] == 0:
            return
        time.sleep(0.05)
    pytest.fail("the abandoned request kept running")


def test_an_explicit_zero_top_p_is_a_400_naming_top_p_in_each_protocol(server):
    chat = {"model": MODEL, "messages": USER, "top_p": 0}
    assert openai_error(post(server, CHAT, chat), 400)["param"] == "top_p"
    responses = {"model": MODEL, "input": "hi", "top_p": 0}
    assert openai_error(post(server, "/v1/responses", responses), 400)["param"] == "top_p"
    messages = {"model": MODEL, "max_tokens": 4, "messages": USER, "top_p": 0}
    assert "top_p" in anthropic_error(post(server, MESSAGES, messages), 400)["message"]


def test_sampling_validation_names_the_protocols_field(server):
    err = openai_error(post(server, CHAT, {"model": MODEL, "messages": USER, "stop": [""]}), 400)
    assert err["param"] == "stop" and "non-empty" in err["message"]
    body = {"model": MODEL, "max_tokens": 4, "messages": USER, "stop_sequences": [""]}
    assert "non-empty" in anthropic_error(post(server, MESSAGES, body), 400)["message"]
