"""Golden tests: our dialects against each family's official template (vendored in tests/data/templates).

The cache property under test: within a tool loop the next prompt is the previous prompt, plus
exactly what the model wrote (rendered by the dialect), plus the end-of-turn marker. If parsing
and rendering were not inverses, the prompt would fork at the tool call.
"""
from __future__ import annotations

import importlib.util
import json

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from zllm_core.dialects import ChatTemplate, DsmlPrompt, Message, dialect_named

from .sample import CONVERSATION, TEMPLATES, TOOL_LOOP_TURNS, TOOLS, hf_message

FAMILIES = {  # template file -> (dialect, end-of-turn text after the model's output)
    "qwen3.jinja": ("hermes", "<|im_end|>\n"),
    "glm46.jinja": ("glm45", ""),
    "glm47.jinja": ("glm47", ""),
}


def template(name: str) -> ChatTemplate:
    return ChatTemplate((TEMPLATES / name).read_text(encoding="utf-8"), dialect_named(FAMILIES[name][0]))


def hf_render(name: str, messages, **kwargs) -> str:
    source = (TEMPLATES / name).read_text(encoding="utf-8")
    rendered, _ = render_jinja_template(conversations=[[hf_message(m) for m in messages]],
                                        tools=[t.openai_dict() for t in TOOLS], chat_template=source, **kwargs)
    return rendered[0]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("cut", [2, 5, 6, 8, 9])
def test_chat_template_renders_like_transformers(name, cut):
    messages = CONVERSATION[:cut]
    ours = template(name).render(messages, TOOLS, add_generation_prompt=True)
    assert ours == hf_render(name, messages, add_generation_prompt=True)


@pytest.mark.parametrize("name", FAMILIES)
def test_instructions_and_results_match_the_template(name):
    dialect = dialect_named(FAMILIES[name][0])
    prompt = template(name).render(CONVERSATION, TOOLS)
    assert dialect.render_tools(TOOLS) in prompt
    assert dialect.render_tool_results(CONVERSATION[3:5]) in prompt
    assert dialect.render_tool_results(CONVERSATION[8:9]) in prompt


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("turn,first_result", TOOL_LOOP_TURNS)
def test_tool_loop_prompt_extends_previous_prompt_and_output(name, turn, first_result):
    dialect_name, end_of_turn = FAMILIES[name]
    dialect, chat = dialect_named(dialect_name), template(name)
    before = chat.render(CONVERSATION[:turn], TOOLS)
    in_reasoning = dialect.starts_in_reasoning(before)
    output = dialect.render_output(CONVERSATION[turn], in_reasoning)
    after = chat.render(CONVERSATION[:first_result + 1], TOOLS)
    assert after.startswith(before + output + end_of_turn)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("turn,_", TOOL_LOOP_TURNS)
def test_model_output_in_the_prompt_parses_back_to_the_message(name, turn, _):
    dialect = dialect_named(FAMILIES[name][0])
    before = template(name).render(CONVERSATION[:turn], TOOLS)
    in_reasoning = dialect.starts_in_reasoning(before)
    original = CONVERSATION[turn]
    parsed = dialect.parse(dialect.render_output(original, in_reasoning), "req-1", TOOLS, in_reasoning)
    assert (parsed.content, parsed.reasoning) == (original.content, original.reasoning)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [(c.name, c.arguments) for c in original.tool_calls]
    assert not parsed.errors and not parsed.repairs


def test_qwen3_renders_the_documented_layout():
    prompt = template("qwen3.jinja").render(CONVERSATION[:3], TOOLS, add_generation_prompt=False)
    assert prompt.endswith(
        '<|im_start|>assistant\n<think>\nNeed the listing and setup.py.\n</think>\n\nI\'ll look around.\n'
        '<tool_call>\n{"name": "list_dir", "arguments": {"path": "."}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "setup.py", "limit": 40}}\n</tool_call><|im_end|>\n')


def test_glm47_renders_the_newline_free_layout():
    prompt = template("glm47.jinja").render(CONVERSATION[:4], TOOLS, add_generation_prompt=False)
    assert ('<|assistant|><think>Need the listing and setup.py.</think>I\'ll look around.'
            '<tool_call>list_dir<arg_key>path</arg_key><arg_value>.</arg_value></tool_call>'
            '<tool_call>read_file<arg_key>path</arg_key><arg_value>setup.py</arg_value>'
            '<arg_key>limit</arg_key><arg_value>40</arg_value></tool_call>'
            '<|observation|><tool_response>setup.py\nsrc/</tool_response>') in prompt


@pytest.mark.parametrize("name", ["qwen3.jinja", "glm46.jinja"])
def test_new_user_turn_drops_earlier_reasoning(name):
    """Documented cache effect: once a new user message arrives, these templates re-render earlier
    assistant turns without their reasoning, so the prompt forks at the first such turn."""
    prompt = template(name).render(CONVERSATION, TOOLS)
    assert "Need the listing and setup.py." not in prompt
    assert "Run the suite." in prompt


def test_glm47_clear_thinking_false_keeps_history_reasoning():
    prompt = template("glm47.jinja").render(CONVERSATION, TOOLS, clear_thinking=False)
    assert "<think>Need the listing and setup.py.</think>" in prompt


# --- DeepSeek V3.2: the reference encoder is the template ------------------------------------

def reference_encoder():
    spec = importlib.util.spec_from_file_location("encoding_dsv32", TEMPLATES / "deepseek_v32_encoding.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_messages(messages):
    out = []
    for m in messages:
        d = {"role": m.role, "content": m.content}
        if m.reasoning is not None:
            d["reasoning"] = m.reasoning
        if m.tool_calls:
            d["tool_calls"] = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                               for c in m.tool_calls]
        out.append(d)
    out[0]["tools"] = [t.openai_dict() for t in TOOLS]
    return out


@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("cut", [2, 5, 6, 7, 9])
def test_dsml_prompt_matches_reference_encoder(thinking, cut):
    messages = CONVERSATION[:cut]
    expected = reference_encoder().encode_messages(reference_messages(messages),
                                                   thinking_mode="thinking" if thinking else "chat")
    assert DsmlPrompt().render(messages, TOOLS, thinking=thinking) == expected


@pytest.mark.parametrize("turn,first_result", TOOL_LOOP_TURNS)
def test_dsml_tool_loop_prompt_extends_previous_prompt_and_output(turn, first_result):
    prompt, dialect = DsmlPrompt(), dialect_named("dsml")
    before = prompt.render(CONVERSATION[:turn], TOOLS)
    output = dialect.render_output(CONVERSATION[turn], dialect.starts_in_reasoning(before))
    after = prompt.render(CONVERSATION[:first_result + 1], TOOLS)
    assert after.startswith(before + output + "<｜end▁of▁sentence｜>")
    parsed = dialect.parse(output, "req", TOOLS, in_reasoning=True)
    assert parsed.message().tool_calls[0].arguments == CONVERSATION[turn].tool_calls[0].arguments


def test_dsml_reference_encoder_writes_what_the_dialect_writes():
    ref = reference_encoder()
    call = CONVERSATION[7].tool_calls[0]
    openai_call = {"name": call.name, "arguments": call.arguments}
    expected = ref.tool_call_template.format(dsml_token=ref.dsml_token, name=call.name,
                                             arguments=ref.encode_arguments_to_dsml(openai_call))
    assert dialect_named("dsml").render_tool_calls([call]) == \
        ref.tool_calls_template.format(dsml_token=ref.dsml_token, tool_calls=expected)
    assert dialect_named("dsml").render_tools(TOOLS) == ref.render_tools([t.openai_dict()["function"] for t in TOOLS])
    assert json.loads(call.arguments)["env"] == {"CI": True}


def test_packaged_qwen3_template_is_the_vendored_one():
    from importlib.resources import files
    packaged = files("zllm_core.dialects").joinpath("templates/qwen3.jinja").read_text(encoding="utf-8")
    assert packaged == (TEMPLATES / "qwen3.jinja").read_text(encoding="utf-8")


def test_glm47_clear_thinking_false_extends_the_prompt_across_user_turns():
    chat, dialect = template("glm47.jinja"), dialect_named("glm47")
    before = chat.render(CONVERSATION[:5], TOOLS, clear_thinking=False)
    output = dialect.render_output(CONVERSATION[5], dialect.starts_in_reasoning(before))
    assert chat.render(CONVERSATION[:7], TOOLS, clear_thinking=False).startswith(before + output)


def test_qwen3_without_thinking_forks_at_each_earlier_assistant_turn():
    chat, dialect = template("qwen3.jinja"), dialect_named("hermes")
    turn = Message("assistant", "", None, CONVERSATION[2].tool_calls)
    before = chat.render(CONVERSATION[:2], TOOLS, enable_thinking=False)
    after = chat.render([*CONVERSATION[:2], turn, *CONVERSATION[3:5]], TOOLS, enable_thinking=False)
    assert before.endswith("<think>\n\n</think>\n\n")
    assert not after.startswith(before)
    assert after.startswith(before.removesuffix("<think>\n\n</think>\n\n") + dialect.render_output(turn))


def test_dsml_new_user_turn_flips_the_previous_user_suffix():
    first = DsmlPrompt().render(CONVERSATION[:2], TOOLS)
    assert first.endswith("<｜User｜>List the repo and read setup.py.<｜Assistant｜><think>")
    later = DsmlPrompt().render(CONVERSATION, TOOLS)
    assert "<｜User｜>List the repo and read setup.py.<｜Assistant｜></think>" in later
