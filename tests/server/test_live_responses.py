"""Responses over HTTP (SSE) and WebSocket on a live server through the official openai SDK."""
import openai
import pytest

from .conftest import API_KEY, MODEL, start_server
from .shapes import codex_request, responses_conversation
from .validators import validate_responses_stream


def test_responses_non_streaming(openai_client):
    r = openai_client.responses.create(model=MODEL, input="Say hi.", max_output_tokens=8, temperature=0,
                                       instructions="Be brief.")
    assert r.status in ("completed", "incomplete") and r.output
    assert r.usage.input_tokens_details.cached_tokens is not None
    assert openai_client.responses.retrieve(r.id).id == r.id


def test_responses_streaming_item_ids_match_final_response(openai_client):
    body = {k: v for k, v in responses_conversation(MODEL).items() if k != "model"}
    stream = openai_client.responses.create(model=MODEL, stream=True, max_output_tokens=8, temperature=0, **body)
    events = [e.model_dump(exclude_unset=True) for e in stream]
    final = validate_responses_stream(events)
    assert final["usage"]["output_tokens"] <= 8


def test_codex_shaped_request_is_answered(openai_client):
    body = codex_request(MODEL, stream=True)
    extra = {k: body.pop(k) for k in ("text",)}
    stream = openai_client.responses.create(max_output_tokens=8, temperature=0, extra_body=extra, **body)
    final = validate_responses_stream([e.model_dump(exclude_unset=True) for e in stream])
    assert final["store"] is False
    with pytest.raises(openai.NotFoundError):  # store: false keeps nothing
        openai_client.responses.retrieve(final["id"])


def test_previous_response_chain_survives_a_restart(server, openai_client):
    r1 = openai_client.responses.create(model=MODEL, input="Remember the word kiwi.",
                                        max_output_tokens=4, temperature=0)
    # A fresh server process on the same store file has only the disk to continue from.
    restarted = start_server(server.store)
    try:
        client = openai.OpenAI(base_url=restarted.url + "/v1", api_key=API_KEY, max_retries=0)
        r2 = client.responses.create(model=MODEL, input="Which word?", previous_response_id=r1.id,
                                     max_output_tokens=4, temperature=0)
        # The rebuilt prompt holds the first turn, its answer and the new question.
        assert r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens
        assert r2.previous_response_id == r1.id
        client.responses.delete(r1.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model=MODEL, input="x", previous_response_id=r1.id)
    finally:
        restarted.stop()


def test_two_servers_on_one_postgres_store_continue_each_others_responses(postgres, tmp_path):
    """Ingresses on different hosts share previous_response_id through PostgreSQL."""
    url = postgres.new_database()
    first, second = (start_server(tmp_path / name, response_store=url) for name in ("a", "b"))
    try:
        a, b = (openai.OpenAI(base_url=s.url + "/v1", api_key=API_KEY, max_retries=0) for s in (first, second))
        r1 = a.responses.create(model=MODEL, input="Remember the word kiwi.", max_output_tokens=4, temperature=0)
        r2 = b.responses.create(model=MODEL, input="Which word?", previous_response_id=r1.id,
                                max_output_tokens=4, temperature=0)
        assert r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens
        assert a.responses.retrieve(r2.id).previous_response_id == r1.id
        b.responses.delete(r2.id)
        with pytest.raises(openai.NotFoundError):
            a.responses.retrieve(r2.id)
    finally:
        first.stop()
        second.stop()


def _turn(connection) -> list[dict]:
    events = []
    for event in connection:
        events.append(event.model_dump(exclude_unset=True))
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError("connection closed mid-response")


def test_websocket_serves_two_serial_turns(openai_client):
    with openai_client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Hello there.", max_output_tokens=6, temperature=0,
                                   store=False)
        first = validate_responses_stream(_turn(connection))
        connection.response.create(model=MODEL, input="And again.", max_output_tokens=6, temperature=0,
                                   store=False, previous_response_id=first["id"])
        second = validate_responses_stream(_turn(connection))
        assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
        connection.response.create(model=MODEL, input="x", previous_response_id="resp_missing")
        (error,) = _turn(connection)
        assert error["error"]["code"] == "previous_response_not_found"


def test_websocket_rejects_a_second_response_in_flight(openai_client):
    with openai_client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Long answer please.", max_output_tokens=64,
                                   temperature=0)
        connection.response.create(model=MODEL, input="Too soon.", max_output_tokens=4, temperature=0)
        events = _turn(connection)
        errors = [e for e in events if e["type"] == "error"]
        if not errors:  # the rejection may arrive after the first response completed
            errors = _turn(connection)
        assert errors[-1]["error"]["code"] == "response_already_in_flight"
