"""The real template and tokenizer: one conversation, one prompt, whichever protocol carried it;
and model tool-call text streams out through every protocol and echoes back to the same prompt."""
import json

import pytest

from zllm_core.model.model_names import resolve_model
from zllm_core.protocols import anthropic_messages as am
from zllm_core.protocols import openai_chat as oc
from zllm_core.protocols import openai_responses as orr
from zllm_core.protocols.responses_stream import ResponsesStream
from zllm_core.protocols.canonical import Finish, SamplingParams, Usage
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.tool_call_memory import ToolCallMemory
from zllm_core.tokenizer import Tokenizer

from .shapes import (
    ANTHROPIC_CONVERSATION, ARGS, CHAT_CONVERSATION, RESPONSES_CONVERSATION, WEATHER,
    claude_code_request,
)
from .validators import validate_anthropic_stream, validate_chat_stream, validate_responses_stream

# What a Hermes-dialect model writes for one call, streamed in awkward pieces.
MODEL_TEXT = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def prompts():
    model_dir = resolve_model("zllm-demo")
    return PromptBuilder.from_model_dir(model_dir, Tokenizer.from_pretrained(model_dir))


def chat(body):
    return oc.to_canonical(oc.ChatRequest.model_validate(body))


def messages(body):
    return am.to_canonical(am.MessagesRequest.model_validate(body))


def responses(body):
    return orr.to_canonical(orr.ResponsesRequest.model_validate(body), [])


def test_one_conversation_yields_the_same_prompt_ids_through_three_protocols(prompts):
    ids = [prompts.build(req).token_ids.tolist() for req in (
        chat(CHAT_CONVERSATION), messages(ANTHROPIC_CONVERSATION), responses(RESPONSES_CONVERSATION))]
    assert ids[0] == ids[1] == ids[2]


def test_billing_header_nonce_does_not_change_the_prompt(prompts):
    a, b = claude_code_request("m"), claude_code_request("m")
    b["system"][0]["text"] = b["system"][0]["text"].replace("cch=9f8e7d6c", "cch=12345678")
    assert prompts.build(messages(a)).token_ids.tolist() == prompts.build(messages(b)).token_ids.tolist()
    assert "x-anthropic-billing-header" not in prompts.render(messages(a))


def parsed_events(prompts, req):
    parser = prompts.parser(req, prompts.build(req), "req-1")
    events = []
    for i in range(0, len(MODEL_TEXT), 7):
        events += parser.feed(MODEL_TEXT[i:i + 7])
    return events + parser.finish()


def encode(encoder, events):
    out = encoder.start()
    for ev in events:
        out += encoder.event(ev)
    return out + encoder.finish(Finish("tool_calls", Usage(10, 5)))


def test_model_tool_call_text_streams_through_every_protocol(prompts):
    req = chat({"model": "m", "tools": [{"type": "function", "function": WEATHER}],
                "messages": [{"role": "user", "content": "Weather?"}]})
    events = parsed_events(prompts, req)
    chunks = encode(oc.ChatStream("c", "m", include_usage=True), events)
    validate_chat_stream(chunks, include_usage=True)
    args = "".join(c["function"]["arguments"] for ch in chunks if ch["choices"]
                   for c in ch["choices"][0]["delta"].get("tool_calls", []))
    assert json.loads(args) == ARGS
    final = validate_responses_stream(encode(ResponsesStream(
        orr.ResponsesRequest.model_validate({"model": "m", "input": "x"}), "r", "m",
        SamplingParams()), events))
    assert [i["type"] for i in final["output"]] == ["message", "function_call"]
    anthropic = encode(am.MessagesStream("msg", "m", 10), events)
    validate_anthropic_stream(anthropic)
    assert [e["content_block"]["type"] for e in anthropic if e["type"] == "content_block_start"] \
        == ["text", "tool_use"]


def test_a_parsed_call_echoed_back_renders_what_the_model_wrote(prompts):
    """Tool echo: parse the model's call, send it back as history, and the prompt continues
    with exactly the text the model produced (no fork at the call)."""
    user = [{"role": "user", "content": "Weather?"}]
    tools = [{"type": "function", "function": WEATHER}]
    req = chat({"model": "m", "tools": tools, "messages": user})
    call = next(e for e in parsed_events(prompts, req) if type(e).__name__ == "ToolCallStart")
    history = chat({"model": "m", "tools": tools, "messages": [*user, {
        "role": "assistant", "content": "Let me check.",
        "tool_calls": [{"id": call.id, "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "18C"}]})
    assert prompts.render(history).startswith(prompts.render(req) + MODEL_TEXT)


def test_an_anthropic_echo_of_compact_arguments_renders_the_model_text(prompts):
    """Anthropic returns calls as objects; the server remembers the model's own argument text
    (here without spaces) so the echo does not re-serialize it into a different prompt."""
    compact = '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>'
    body = {"model": "m", "max_tokens": 4, "tools": [{"name": "get_weather", "input_schema": WEATHER["parameters"]}],
            "messages": [{"role": "user", "content": "Weather?"}]}
    req = messages(body)
    memory = ToolCallMemory()
    recorder = memory.watch()
    parser = prompts.parser(req, prompts.build(req), "req-2")
    call_id = None
    for ev in parser.feed(compact) + parser.finish():
        recorder.see(ev)
        call_id = getattr(ev, "id", call_id)
    echo = {**body, "messages": [*body["messages"],
                                 {"role": "assistant", "content": [{"type": "tool_use", "id": call_id,
                                                                    "name": "get_weather", "input": ARGS}]},
                                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                                               "content": "18C"}]}]}
    rendered = prompts.render(am.to_canonical(am.MessagesRequest.model_validate(echo), memory.get))
    assert rendered.startswith(prompts.render(req) + compact)
    forgetful = prompts.render(am.to_canonical(am.MessagesRequest.model_validate(echo)))
    assert not forgetful.startswith(prompts.render(req) + compact)
