"""The stream encoders, fed canonical output events, produce streams their validators accept."""
import asyncio
import json

import pytest

from zllm_core.protocols import anthropic_messages as am
from zllm_core.protocols import openai_chat as oc
from zllm_core.protocols import openai_responses as orr
from zllm_core.protocols.canonical import (
    Finish, ParsedOutput, ReasoningDelta, RequestError, SamplingParams, TextDelta,
    ToolCallArgsDelta, ToolCallEnd, ToolCallStart, Usage,
)
from zllm_core.protocols.responses_stream import ResponsesStream
from zllm_core.server.generation import encoded

from .validators import validate_anthropic_stream, validate_chat_stream, validate_responses_stream

USAGE = Usage(prompt_tokens=40, completion_tokens=12, cached_tokens=16)

# Reasoning, text, then two parallel tool calls whose arguments arrive in pieces.
EVENTS = [
    ReasoningDelta("Need the "), ReasoningDelta("weather."),
    TextDelta("Checking"), TextDelta(" two cities."),
    ToolCallStart(0, "call_a", "get_weather"), ToolCallArgsDelta(0, '{"city": '),
    ToolCallArgsDelta(0, '"Paris"}'), ToolCallEnd(0),
    ToolCallStart(1, "call_b", "tools__get_time"), ToolCallArgsDelta(1, '{"tz": "UTC"}'),
    ToolCallEnd(1),
]


def run(encoder, events=EVENTS, reason="tool_calls"):
    out = encoder.start()
    for ev in events:
        out += encoder.event(ev)
    return out + encoder.finish(Finish(reason, USAGE))


def test_chat_stream_keeps_call_index_and_sends_id_and_name_once():
    chunks = run(oc.ChatStream("chatcmpl-1", "m", include_usage=True))
    validate_chat_stream(chunks, include_usage=True)
    calls = [c for ch in chunks if ch["choices"] for c in ch["choices"][0]["delta"].get("tool_calls", [])]
    args = {0: "", 1: ""}
    for c in calls:
        args[c["index"]] += c["function"]["arguments"]
    assert json.loads(args[0]) == {"city": "Paris"} and json.loads(args[1]) == {"tz": "UTC"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 16
    reasoning = "".join(ch["choices"][0]["delta"].get("reasoning_content", "") for ch in chunks if ch["choices"])
    assert reasoning == "Need the weather."


def test_chat_stream_without_usage_has_no_usage_chunk():
    chunks = run(oc.ChatStream("chatcmpl-1", "m", include_usage=False), [TextDelta("hi")], "stop")
    validate_chat_stream(chunks)
    assert all("usage" not in c for c in chunks)


def responses_request(**kw):
    return orr.ResponsesRequest.model_validate({
        "model": "m", "input": "hi",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {}},
                  {"type": "namespace", "name": "tools", "description": "",
                   "tools": [{"type": "function", "name": "get_time"}]}], **kw})


def test_responses_stream_items_match_final_response():
    enc = ResponsesStream(responses_request(include=["reasoning.encrypted_content"]), "resp_1", "m", SamplingParams())
    final = validate_responses_stream(run(enc))
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call", "function_call"]
    reasoning, message, call_a, call_b = final["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Need the weather."}]
    assert orr.opened_reasoning(reasoning["encrypted_content"]) == "Need the weather."
    assert message["content"][0]["text"] == "Checking two cities."
    assert (call_a["call_id"], call_a["name"], call_a["arguments"]) == ("call_a", "get_weather", '{"city": "Paris"}')
    assert (call_b["namespace"], call_b["name"]) == ("tools", "get_time")
    assert final["usage"]["input_tokens_details"]["cached_tokens"] == 16
    assert final["status"] == "completed"


def test_responses_stream_reports_length_as_incomplete():
    final = validate_responses_stream(run(ResponsesStream(responses_request(), "r", "m", SamplingParams()),
                                          [TextDelta("a")], "length"))
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}


def test_anthropic_stream_opens_and_closes_each_block_in_order():
    events = run(am.MessagesStream("msg_1", "m", prompt_tokens=40))
    validate_anthropic_stream(events)
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use", "tool_use"]
    final = next(e for e in events if e["type"] == "message_delta")
    assert final["delta"]["stop_reason"] == "tool_use"
    # Anthropic's input_tokens excludes the cached prefix.
    assert final["usage"]["input_tokens"] == 24 and final["usage"]["cache_read_input_tokens"] == 16


def test_non_streaming_objects_carry_the_same_content():
    out = ParsedOutput.fold(EVENTS)
    chat = oc.completion("c", "m", out, Finish("tool_calls", USAGE))["choices"][0]
    assert chat["message"]["reasoning_content"] == "Need the weather."
    assert [c["id"] for c in chat["message"]["tool_calls"]] == ["call_a", "call_b"]
    msg = am.message("msg", "m", out, Finish("tool_calls", USAGE))
    assert [b["type"] for b in msg["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert msg["content"][2]["input"] == {"city": "Paris"}


@pytest.mark.parametrize("broken", [
    lambda ev: ev.insert(3, {"type": "content_block_delta", "index": 7,
                             "delta": {"type": "text_delta", "text": "x"}}),
    lambda ev: ev.pop(-2),  # no message_delta
])
def test_anthropic_validator_rejects_broken_order(broken):
    events = run(am.MessagesStream("msg_1", "m", prompt_tokens=40))
    broken(events)
    with pytest.raises(AssertionError):
        validate_anthropic_stream(events)


def test_responses_validator_rejects_gapped_sequence_numbers():
    events = run(ResponsesStream(responses_request(), "r", "m", SamplingParams()))
    del events[4]
    with pytest.raises(AssertionError):
        validate_responses_stream(events)


async def failing_after(events, error=RequestError("engine step failed")):
    for ev in events:
        yield ev
    raise error


@pytest.mark.parametrize("make", [
    lambda: oc.ChatStream("c", "m", include_usage=False),
    lambda: am.MessagesStream("msg", "m", 10),
    lambda: ResponsesStream(responses_request(), "r", "m", SamplingParams()),
])
def test_a_failure_before_any_output_raises_and_after_it_becomes_an_error_event(make):
    async def drain(events):
        return [p async for p in encoded(make(), failing_after(events))]
    with pytest.raises(RequestError):
        asyncio.run(drain([]))
    payloads = asyncio.run(drain([TextDelta("partial")]))
    last = payloads[-1]
    assert last.get("type") == "error" or "error" in last
    assert "engine step failed" in json.dumps(last)


@pytest.mark.parametrize("make", [
    lambda: oc.ChatStream("c", "m", include_usage=False),
    lambda: am.MessagesStream("msg", "m", 10),
    lambda: ResponsesStream(responses_request(), "r", "m", SamplingParams()),
])
def test_an_internal_failure_mid_stream_ends_the_stream_with_a_500_class_error(make, caplog):
    async def drain(events):
        bug = KeyError("parser bug")
        return [p async for p in encoded(make(), failing_after(events, bug))]
    with pytest.raises(KeyError):
        asyncio.run(drain([]))
    with caplog.at_level("ERROR", logger="zllm.server"):
        payloads = asyncio.run(drain([TextDelta("partial")]))
    last = payloads[-1]
    assert last.get("type") == "error" or "error" in last
    assert "internal server error" in json.dumps(last) and "parser bug" not in json.dumps(last)
    assert any("parser bug" in (r.exc_text or "") for r in caplog.records)
