"""Chat Completions on a live server through the official openai SDK."""
import httpx

from .conftest import MODEL
from .shapes import WEATHER, chat_conversation
from .validators import validate_chat_stream

TOOLS = [{"type": "function", "function": WEATHER}]


def test_chat_non_streaming_with_tools(openai_client):
    r = openai_client.chat.completions.create(
        model=MODEL, max_tokens=8, tools=TOOLS, tool_choice="auto", temperature=0.7, top_p=0.9,
        seed=3, messages=[{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}])
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.completion_tokens <= 8
    assert r.usage.prompt_tokens_details.cached_tokens is not None


def test_chat_streaming_with_tools_and_usage(openai_client):
    stream = openai_client.chat.completions.create(
        model=MODEL, max_completion_tokens=8, stream=True, stream_options={"include_usage": True},
        temperature=0,
        **{k: v for k, v in chat_conversation(MODEL).items() if k != "model"})
    chunks = [c.model_dump() for c in stream]
    validate_chat_stream(chunks, include_usage=True)
    assert chunks[-1]["usage"]["completion_tokens"] <= 8


def test_a_repeated_prompt_reports_cached_tokens(openai_client):
    body = chat_conversation(MODEL)
    first = openai_client.chat.completions.create(max_tokens=2, seed=1, **body)
    again = openai_client.chat.completions.create(max_tokens=2, seed=1, **body)
    assert again.usage.prompt_tokens == first.usage.prompt_tokens
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_output_is_capped_by_max_output_tokens(openai_client):
    r = openai_client.chat.completions.create(
        model=MODEL, max_tokens=10_000, messages=[{"role": "user", "content": "Count."}],
        stop=["never-appears"], temperature=0)
    assert r.usage.completion_tokens <= 64  # the server was started with --max-output-tokens 64


def test_models_and_health(server, openai_client, anthropic_client):
    assert [m.id for m in openai_client.models.list()] == [MODEL]
    assert [m.id for m in anthropic_client.models.list()] == [MODEL]
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
