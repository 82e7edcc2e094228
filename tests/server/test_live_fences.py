"""Forced tool calls and JSON output through `zllm serve` and the official SDKs: valid under the
request's schema whatever the (random) weights, with sampling on, in all three protocols, and in
GLM's dialect for a model whose chat template is GLM's."""
import json
import shutil
from pathlib import Path

import anthropic
import jsonschema
import openai
import pytest

from zllm_core.model.demo import ensure_demo_model

from .conftest import API_KEY, MODEL, start_server

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"tz": {"enum": ["UTC", "Europe/Paris"]}}, "required": ["tz"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
              {"type": "function", "function": {"name": "get_time", "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL_TOKENS = 112  # a DSML call spells ~60 Qwen tokens of tags


@pytest.fixture(scope="module", params=["qwen3", "glm46", "glm47", "dsml"])
def chat_client(request, openai_client, tmp_path_factory):
    """The demo model under its own template (Hermes calls), or its weights under GLM's (the
    server takes the dialect from the template, as it would for a GLM checkpoint), or with no
    template and `--tool-dialect dsml` (DeepSeek-V3.2 ships none: its encoder's layout renders)."""
    if request.param == "qwen3":
        yield openai_client
        return
    model, demo = tmp_path_factory.mktemp(request.param), ensure_demo_model()
    for name in ("config.json", "generation_config.json", "tokenizer_config.json", "model.safetensors"):
        (model / name).symlink_to(demo / name)
    flags = ["--tool-dialect", "dsml"] if request.param == "dsml" else []
    if not flags:
        shutil.copy(TEMPLATES / f"{request.param}.jinja", model / "chat_template.jinja")
    live = start_server(tmp_path_factory.mktemp("store") / "responses.sqlite3", "--served-model-name", MODEL,
                        *flags, model=str(model))
    yield openai.OpenAI(base_url=live.url + "/v1", api_key=API_KEY, max_retries=0)
    live.stop()


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_chat_forced_calls_are_valid(chat_client, choice):
    for seed in range(3):
        r = chat_client.chat.completions.create(model=MODEL, messages=USER, tools=CHAT_TOOLS, tool_choice=choice,
                                                max_tokens=CALL_TOKENS, temperature=1.0, seed=seed)
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and calls
        for call in calls:
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
            assert isinstance(choice, str) or call.function.name == "get_time"


def test_chat_streamed_argument_deltas_concatenate_to_valid_arguments(chat_client):
    stream = chat_client.chat.completions.create(model=MODEL, messages=USER, tools=CHAT_TOOLS,
                                                 tool_choice="required", max_tokens=CALL_TOKENS, temperature=1.0,
                                                 seed=4, stream=True, parallel_tool_calls=False)
    names, args, finish = {}, {}, None
    for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or []:
            if call.function.name:
                names[call.index] = call.function.name
            args[call.index] = args.get(call.index, "") + (call.function.arguments or "")
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and list(names) == [0]  # parallel_tool_calls=False: one call
    jsonschema.validate(json.loads(args[0]), SCHEMAS[names[0]])


def test_chat_json_schema_response_is_valid(openai_client):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 12},
                                               "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
              "required": ["answer", "confidence"]}
    for seed in range(3):
        r = openai_client.chat.completions.create(
            model=MODEL, messages=USER, max_tokens=48, temperature=1.0, seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}})
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_responses_forced_calls_are_valid(openai_client):
    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
             for t in CHAT_TOOLS]
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        r = openai_client.responses.create(model=MODEL, input="Weather?", tools=tools, tool_choice=choice,
                                           max_output_tokens=64, temperature=1.0)
        calls = [item for item in r.output if item.type == "function_call"]
        assert r.status == "completed" and calls
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_responses_json_schema_text_format(openai_client):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = openai_client.responses.create(model=MODEL, input="ok?", max_output_tokens=32, temperature=1.0,
                                       text={"format": {"type": "json_schema", "name": "ok", "schema": schema}})
    assert json.loads(r.output_text) in ({"ok": True}, {"ok": False})
    assert r.text.format.type == "json_schema"


def test_messages_any_and_named_tool_are_valid(anthropic_client):
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in CHAT_TOOLS]
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_time"}):
        m = anthropic_client.messages.create(model=MODEL, max_tokens=64, messages=USER, tools=tools,
                                             tool_choice=choice)  # temperature 1, the default
        uses = [b for b in m.content if b.type == "tool_use"]
        assert m.stop_reason == "tool_use" and uses
        for use in uses:
            jsonschema.validate(use.input, SCHEMAS[use.name])
            assert choice["type"] == "any" or use.name == "get_time"


def test_unenforceable_schemas_are_400s_naming_the_field(openai_client, anthropic_client):
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, response_format={
            "type": "json_schema", "json_schema": {"name": "x"}})
    assert e.value.body["param"] == "response_format.json_schema.schema"
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, tools=[
            {"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}}}], tool_choice="required")
    assert e.value.body["param"] == "tools" and "multipleOf" in e.value.message
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_client.messages.create(model=MODEL, max_tokens=8, messages=USER, tool_choice={"type": "any"},
                                         tools=[{"name": "f", "input_schema": {"not": {"type": "null"}}}])
    assert "not" in e.value.message


def test_logprobs_of_a_fenced_call_are_finite_json(openai_client):
    r = openai_client.chat.completions.create(model=MODEL, messages=USER, tools=CHAT_TOOLS, tool_choice="required",
                                              max_tokens=48, temperature=1.0, seed=1, logprobs=True, top_logprobs=5)
    entries = r.choices[0].logprobs.content
    assert entries and r.choices[0].message.tool_calls
    # Where the fence allows fewer than five tokens, fewer alternatives come back, none -inf.
    assert any(len(e.top_logprobs) < 5 for e in entries)
    assert all(t.logprob > float("-inf") for e in entries for t in e.top_logprobs)


def test_a_response_format_with_a_forced_tool_is_a_400(openai_client):
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, tools=CHAT_TOOLS,
                                              tool_choice="required", response_format={"type": "json_object"})
    assert e.value.body["param"] == "tool_choice"


def test_a_tool_name_the_dialects_cannot_print_is_a_400(openai_client):
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, tools=[
            {"type": "function", "function": {"name": 'say "hi"', "parameters": {"type": "object"}}}])
    assert e.value.body["param"] == "tools[0].function.name"
