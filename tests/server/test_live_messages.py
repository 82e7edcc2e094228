"""Anthropic Messages on a live server through the official anthropic SDK."""
from .conftest import MODEL
from .shapes import anthropic_conversation, claude_code_request
from .validators import validate_anthropic_stream

EXTRA = ("context_management", "output_config", "temperature")
# MessageStream also yields its own convenience events; the validator reads the wire events.
CONVENIENCE = ("text", "thinking", "input_json", "citation", "signature")


def greedy(body: dict) -> dict:
    # This SDK version no longer takes temperature as an argument; the API still does.
    return {**body, "extra_body": {**body.get("extra_body", {}), "temperature": 0}}


def wire_events(stream) -> list[dict]:
    return [event.model_dump() for event in stream if event.type not in CONVENIENCE]


def test_messages_create(anthropic_client):
    m = anthropic_client.messages.create(**greedy(dict(
        model=MODEL, max_tokens=8, system="Be brief.", messages=[{"role": "user", "content": "Hi"}])))
    assert m.type == "message" and m.role == "assistant"
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert m.usage.output_tokens <= 8 and m.usage.cache_read_input_tokens is not None


def test_messages_stream_with_tools(anthropic_client):
    body = greedy(anthropic_conversation(MODEL))
    with anthropic_client.messages.stream(**body) as stream:
        raw = wire_events(stream)
        final = stream.get_final_message()
    validate_anthropic_stream(raw)
    assert final.usage.output_tokens <= 8


def test_count_tokens_counts_what_the_model_sees(anthropic_client):
    body = greedy(anthropic_conversation(MODEL))
    counted = anthropic_client.messages.count_tokens(
        model=MODEL, system=body["system"], tools=body["tools"], messages=body["messages"])
    m = anthropic_client.messages.create(**body)
    assert counted.input_tokens == m.usage.input_tokens + m.usage.cache_read_input_tokens
    bare = anthropic_client.messages.count_tokens(model=MODEL, messages=body["messages"])
    assert bare.input_tokens < counted.input_tokens  # system and tools are counted too


def test_claude_code_shaped_request_is_answered(anthropic_client):
    body = {**claude_code_request(MODEL, stream=True), "temperature": 0}
    extra = {k: body.pop(k) for k in EXTRA}
    body.pop("stream")
    with anthropic_client.messages.stream(extra_body=extra, **body) as stream:
        raw = wire_events(stream)
    validate_anthropic_stream(raw)
    # The billing header's per-request nonce must not fork the prefix: a second request with
    # another nonce reuses the cached prompt.
    body2 = {**claude_code_request(MODEL), "temperature": 0}
    body2["system"][0]["text"] = body2["system"][0]["text"].replace("cch=9f8e7d6c", "cch=00000000")
    extra2 = {k: body2.pop(k) for k in EXTRA}
    again = anthropic_client.messages.create(extra_body=extra2, **{**body2, "max_tokens": 2})
    assert again.usage.cache_read_input_tokens > 0


def test_a_matched_stop_sequence_is_reported(anthropic_client):
    body = dict(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Count."}])
    free = anthropic_client.messages.create(**greedy(body))
    text = "".join(block.text for block in free.content if block.type == "text")
    stop = text.strip()[:2]
    assert stop, "the greedy demo output is expected to hold text"
    m = anthropic_client.messages.create(**greedy({**body, "stop_sequences": [stop]}))
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
