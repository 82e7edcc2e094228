"""Fuzzing the request models on the live server: mutated and random bodies never get a 500,
and every rejection comes in its protocol's error shape."""
import copy
import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zllm_core.protocols.anthropic_messages import MessagesRequest
from zllm_core.protocols.openai_chat import ChatRequest
from zllm_core.protocols.openai_responses import ResponsesRequest

from .conftest import API_KEY, MODEL
from .shapes import anthropic_conversation, chat_conversation, responses_conversation

FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False)
    | st.text(max_size=12) | st.sampled_from(["user", "assistant", "tool", "text", "function"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)


def paths(value, prefix=()):
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from paths(child, prefix + (key,))


def mutate(base, edits):
    body = copy.deepcopy(base)
    for path, action, value in edits:
        parent = body
        try:
            for key in path[:-1]:
                parent = parent[key]
            if action == "delete":
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    return body


def edits_for(base, fields):
    """Delete or replace anything in the body, or set any top-level field the model knows."""
    all_paths = [p for p in paths(base) if p] + [(f,) for f in fields]
    return st.lists(st.tuples(st.sampled_from(all_paths), st.sampled_from(["delete", "replace"]),
                              json_values), min_size=1, max_size=3)


MODELS = {"/v1/chat/completions": ChatRequest, "/v1/messages": MessagesRequest,
          "/v1/responses": ResponsesRequest}
ENDPOINTS = {
    "/v1/chat/completions": {**chat_conversation(MODEL), "max_tokens": 1, "temperature": 0},
    "/v1/messages": {**anthropic_conversation(MODEL), "max_tokens": 1, "temperature": 0},
    "/v1/responses": {**responses_conversation(MODEL), "max_output_tokens": 1, "temperature": 0},
}


def check(server, path, content):
    r = httpx.post(server.url + path, content=content, timeout=120,
                   headers={"content-type": "application/json", "authorization": f"Bearer {API_KEY}"})
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        body = r.json()
        if path == "/v1/messages":
            assert body["type"] == "error" and body["error"]["message"]
        else:
            assert body["error"]["message"]


@pytest.mark.parametrize("path", list(ENDPOINTS))
def test_mutated_requests_never_get_a_500(server, path):
    base = ENDPOINTS[path]

    @FUZZ
    @given(edits_for(base, sorted(MODELS[path].model_fields)))
    def run(edits):
        check(server, path, json.dumps(mutate(base, edits)))
    run()


@FUZZ
@given(st.sampled_from(list(ENDPOINTS)), json_values | st.binary(max_size=40))
def test_random_bodies_never_get_a_500(server, path, body):
    check(server, path, body if isinstance(body, bytes) else json.dumps(body))
