"""ChatTemplate: loading from a model directory, HF's sandbox semantics, dialect selection."""
from __future__ import annotations

import json

import jinja2
import pytest

from zllm_core.dialects import (ChatTemplate, DsmlPrompt, FunctionTool, Message, ToolCall, dialect_for, dialect_named,
                                prompt_for)

from .sample import TEMPLATES

USER = [Message("user", "hi")]


def model_dir(tmp_path, config=None, tokenizer_config=None, jinja=None):
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    if tokenizer_config is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    if jinja is not None:
        (tmp_path / "chat_template.jinja").write_text(jinja)
    return tmp_path


def test_loads_chat_template_jinja_and_picks_its_dialect(tmp_path):
    path = model_dir(tmp_path, {"model_type": "glm4_moe"}, jinja=(TEMPLATES / "glm47.jinja").read_text())
    chat = ChatTemplate.from_model_dir(path)
    assert chat.dialect.name == "glm47"
    assert chat.render(USER) == "[gMASK]<sop><|user|>hi<|assistant|><think>"


def test_loads_template_text_and_special_tokens_from_tokenizer_config(tmp_path):
    path = model_dir(tmp_path, {"model_type": "qwen3"},
                     {"chat_template": "{{ bos_token }}{{ messages[0].content }}", "bos_token": {"content": "<s>"}})
    assert ChatTemplate.from_model_dir(path).render(USER) == "<s>hi"


def test_named_templates_use_default_unless_asked(tmp_path):
    path = model_dir(tmp_path, {"model_type": "qwen3"}, {"chat_template": [
        {"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})
    assert ChatTemplate.from_model_dir(path).render(USER) == "D"
    assert ChatTemplate.from_model_dir(path, name="tool_use").render(USER) == "T"


def test_missing_template_is_reported(tmp_path):
    with pytest.raises(FileNotFoundError):
        ChatTemplate.from_model_dir(model_dir(tmp_path, {"model_type": "qwen3"}))


def test_template_kwargs_reach_the_template():
    chat = ChatTemplate((TEMPLATES / "qwen3.jinja").read_text(), dialect_named("hermes"))
    assert chat.render(USER, enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_sandbox_blocks_python_internals():
    for source in ("{{ ''.__class__.__mro__ }}", "{% set ns = namespace(_x=1) %}"):
        with pytest.raises(jinja2.exceptions.SecurityError):
            ChatTemplate(source, dialect_named("hermes")).render(USER)


def test_raise_exception_and_helpers():
    with pytest.raises(jinja2.exceptions.TemplateError, match="no system"):
        ChatTemplate("{{ raise_exception('no system') }}", dialect_named("hermes")).render(USER)
    out = ChatTemplate("{% generation %}{{ strftime_now('%Y') }}{% endgeneration %}",
                       dialect_named("hermes")).render(USER)
    assert out.isdigit()


def test_arguments_print_back_the_models_own_json_text():
    call = ToolCall("c", "run", '{"cmd":["a",1],  "n": 1.50}')
    messages = [Message("user", "go"), Message("assistant", "", None, (call,))]
    qwen = ChatTemplate((TEMPLATES / "qwen3.jinja").read_text(), dialect_named("hermes"))
    assert '"arguments": {"cmd":["a",1],  "n": 1.50}}' in qwen.render(messages, add_generation_prompt=False)
    glm = ChatTemplate((TEMPLATES / "glm46.jinja").read_text(), dialect_named("glm45"))
    tools = [FunctionTool("run", None, {"type": "object", "properties": {"cmd": {"type": "array"}}})]
    assert '<arg_value>["a",1]</arg_value>\n<arg_key>n</arg_key>\n<arg_value>1.50</arg_value>' in \
        glm.render(messages, tools, add_generation_prompt=False)


def test_glm_template_escapes_a_value_holding_its_closing_tag_like_the_dialect():
    call = ToolCall("c", "write", '{"text": "a</arg_value>b", "meta": {"k": "</arg_value>"}}')
    message = Message("assistant", "", None, (call,))
    dialect = dialect_named("glm45")
    prompt = ChatTemplate((TEMPLATES / "glm46.jinja").read_text(), dialect).render(
        [Message("user", "go"), message], add_generation_prompt=False)
    assert prompt.endswith(dialect.render_output(message))


@pytest.mark.parametrize("config,expected", [
    ({"model_type": "qwen3"}, "hermes"), ({"model_type": "qwen2"}, "hermes"),
    ({"model_type": "glm4_moe"}, "glm45"), ({"model_type": "deepseek_v32"}, "dsml"),
    ({"architectures": ["DeepseekV32ForCausalLM"]}, "dsml"),
])
def test_dialect_from_config(config, expected):
    assert dialect_for(config).name == expected


@pytest.mark.parametrize("template,expected", [
    ("qwen3.jinja", "hermes"), ("glm46.jinja", "glm45"), ("glm47.jinja", "glm47")])
def test_dialect_from_template_beats_config(tmp_path, template, expected):
    path = model_dir(tmp_path, {"model_type": "llama"}, jinja=(TEMPLATES / template).read_text())
    assert dialect_for(path).name == expected


def test_explicit_dialect_wins_and_unknown_is_an_error():
    assert dialect_for({"model_type": "qwen3"}, explicit="DeepSeek").name == "dsml"
    with pytest.raises(ValueError):
        dialect_for({"model_type": "mystery"})
    with pytest.raises(ValueError):
        dialect_named("klingon")


def test_developer_turns_become_system_turns_for_templates_without_that_role():
    chat = ChatTemplate((TEMPLATES / "qwen3.jinja").read_text(), dialect_named("hermes"))
    prompt = chat.render([Message("user", "hi"), Message("developer", "Be brief.")], None)
    assert "<|im_start|>system\nBe brief.<|im_end|>" in prompt


def test_prompt_for_uses_the_dsml_encoder_when_a_deepseek_model_ships_no_template(tmp_path):
    prompt = prompt_for(model_dir(tmp_path, {"model_type": "deepseek_v32"}))
    assert isinstance(prompt, DsmlPrompt)
    assert prompt.render(USER, enable_thinking=False).endswith("<｜User｜>hi<｜Assistant｜></think>")


def test_prompt_for_uses_the_chat_template_otherwise(tmp_path):
    path = model_dir(tmp_path, {"model_type": "qwen3"}, jinja=(TEMPLATES / "qwen3.jinja").read_text())
    assert prompt_for(path).render(USER) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
