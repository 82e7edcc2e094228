"""The protocol router on a fresh FastAPI app of the caller's, over a scripted `generate` (no
zllm_core engine): the official openai and anthropic SDKs stream text and tool calls from it."""
from __future__ import annotations

import json
from importlib import resources

import anthropic
import openai
import pytest
from fastapi import FastAPI

from tests.server.in_process import serving
from tests.server.test_live_messages import wire_events
from tests.server.validators import validate_anthropic_stream, validate_chat_stream, validate_responses_stream
from zllm_core.adapters.asgi import protocol_router
from zllm_core.engine.output_processor import GenerationEvent
from zllm_core.dialects import ChatTemplate, dialect_named
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.runtime import ServerConfig
from zllm_core.tokenizer import Tokenizer

MODEL = "scripted"
END = 151645  # <|im_end|>
TEXT = "Hello from a scripted stream."
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "README.md"}}\n</tool_call>'
TOOL = {"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}


class Script:
    """`generate` for the router: streams `answer` one token per event, then the end token."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer, self.answer, self.prompts = tokenizer, TEXT, []

    async def generate(self, prompt_ids, params, *, request_id, cache):
        self.prompts.append(self.tokenizer.decode(prompt_ids.tolist()))
        ids = self.tokenizer.encode(self.answer, allowed_special="all")[:params.max_tokens - 1]
        usage = dict(prompt_tokens=len(prompt_ids), cached_tokens=0)
        for n, token in enumerate(ids, 1):
            yield GenerationEvent([token], self.tokenizer.decode([token]), None, None,
                                  completion_tokens=n, **usage)
        yield GenerationEvent([END], "", "stop", None, completion_tokens=len(ids) + 1, **usage)


@pytest.fixture(scope="module")
def script() -> Script:
    return Script(Tokenizer.from_family("qwen2"))


@pytest.fixture(scope="module")
def url(script):
    source = (resources.files("zllm_core.dialects") / "templates" / "qwen3.jinja").read_text()
    prompts = PromptBuilder(ChatTemplate(source, dialect_named("hermes")), script.tokenizer)
    app = FastAPI()
    app.include_router(protocol_router(script.generate, prompts, ServerConfig(model_name=MODEL),
                                       max_model_len=4096, end_ids=[END]))
    with serving(app) as base:
        yield base


@pytest.fixture
def answer(script):
    """Sets what the script answers for one test."""
    def say(text: str) -> None:
        script.answer = text
    yield say
    script.answer = TEXT


def test_openai_chat_stream_carries_the_scripted_text_and_usage(url, script):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], stream=True,
        stream_options={"include_usage": True}))
    validate_chat_stream([c.model_dump() for c in chunks], include_usage=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert "Say hello." in script.prompts[-1] and script.prompts[-1].endswith("<|im_start|>assistant\n")
    assert chunks[-1].usage.completion_tokens == len(script.tokenizer.encode(TEXT)) + 1


def test_openai_chat_stream_parses_the_scripted_call(url, answer):
    answer(CALL)
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Read the README."}], stream=True,
        tools=[{"type": "function", "function": TOOL}]))
    validate_chat_stream([c.model_dump() for c in chunks])
    calls = [call for c in chunks for call in c.choices[0].delta.tool_calls or []]
    assert calls[0].function.name == "read_file"
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"path": "README.md"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_openai_responses_stream_carries_the_scripted_text(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    events = list(client.responses.create(model=MODEL, input="Say hello.", stream=True))
    final = validate_responses_stream([e.model_dump() for e in events])
    assert final["status"] == "completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == TEXT


def test_anthropic_stream_carries_the_scripted_text(url):
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    with client.messages.stream(model=MODEL, max_tokens=64,
                                messages=[{"role": "user", "content": "Say hello."}]) as stream:
        raw = wire_events(stream)
        final = stream.get_final_message()
    validate_anthropic_stream(raw)
    assert final.content[0].text == TEXT and final.stop_reason == "end_turn"


def test_anthropic_stream_parses_the_scripted_call(url, answer):
    answer(CALL)
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    tool = {"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}
    with client.messages.stream(model=MODEL, max_tokens=64, tools=[tool],
                                messages=[{"role": "user", "content": "Read the README."}]) as stream:
        final = stream.get_final_message()
    (use,) = [block for block in final.content if block.type == "tool_use"]
    assert use.name == "read_file" and use.input == {"path": "README.md"}
    assert final.stop_reason == "tool_use"


def test_a_request_error_has_the_protocol_shape(url):
    """The routes answer their own errors: the caller's app has no handlers of ours."""
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.NotFoundError, match="does not exist"):
        client.messages.create(model="other", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
