"""One conversation sent through all three protocols to a live server is one prompt: the same
length, and after the first request the others find it in the prefix cache."""
from .conftest import MODEL
from .shapes import anthropic_conversation, chat_conversation, responses_conversation

BLOCK = 16  # the engine's KV block: a cache hit covers the full blocks of the shared prefix


def test_three_protocols_share_one_cached_prompt(openai_client, anthropic_client):
    body = chat_conversation(MODEL)
    body["messages"][0]["content"] += " (parity run)"  # a prefix no other test has cached
    chat = openai_client.chat.completions.create(max_tokens=1, temperature=0, **body).usage
    a_body = anthropic_conversation(MODEL)
    a_body["system"] += " (parity run)"
    msg = anthropic_client.messages.create(extra_body={"temperature": 0}, **{**a_body, "max_tokens": 1}).usage
    r_body = responses_conversation(MODEL)
    r_body["instructions"] += " (parity run)"
    resp = openai_client.responses.create(max_output_tokens=1, temperature=0, **r_body).usage
    n = chat.prompt_tokens
    assert msg.input_tokens + msg.cache_read_input_tokens == n == resp.input_tokens
    assert msg.cache_read_input_tokens >= n - BLOCK
    assert resp.input_tokens_details.cached_tokens >= n - BLOCK
