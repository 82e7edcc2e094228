"""A ChatML template that renders no tools (SmolLM2's) gets the Hermes dialect's: instructions
at the end of the system turn, calls as assistant text, results as user turns -- the bytes
Qwen3's template prints for them -- and within a tool loop each prompt extends the last one."""
from __future__ import annotations

from dataclasses import replace

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from tests.dialects.sample import CONVERSATION, TEMPLATES, TOOL_LOOP_TURNS, TOOLS, hf_message
from tests.tokenizer.gguf_vocabs import write_tokenizer_gguf
from zllm_core.dialects import ChatTemplate, Message, dialect_named, prompt_for
from zllm_core.dialects.selection import dialect_for

SMOLLM2 = (TEMPLATES / "smollm2.jinja").read_text(encoding="utf-8")
HERMES = dialect_named("hermes")


def chat() -> ChatTemplate:
    return ChatTemplate(SMOLLM2, HERMES)


def qwen3(messages) -> str:
    rendered, _ = render_jinja_template(conversations=[[hf_message(m) for m in messages]],
                                        tools=[t.openai_dict() for t in TOOLS],
                                        chat_template=(TEMPLATES / "qwen3.jinja").read_text(encoding="utf-8"))
    return rendered[0]


def test_system_turn_carries_qwen3s_tool_instructions():
    system_turn = qwen3(CONVERSATION[:2]).split("<|im_start|>user")[0]
    assert chat().render(CONVERSATION[:2], TOOLS).startswith(system_turn)
    assert system_turn.startswith("<|im_start|>system\nYou are a coding agent.\n\n# Tools\n")


def test_without_a_system_message_the_instructions_are_one():
    prompt = chat().render(CONVERSATION[1:2], TOOLS)
    assert prompt.startswith("<|im_start|>system\n" + HERMES.render_tools(TOOLS) + "<|im_end|>\n<|im_start|>user\n")


def test_calls_and_results_are_rendered_as_the_dialect_writes_them():
    prompt = chat().render(CONVERSATION, TOOLS)
    calls = HERMES.render_output(replace(CONVERSATION[2], reasoning=None))
    assert f"<|im_start|>assistant\n{calls}<|im_end|>\n" in prompt
    assert HERMES.render_tool_results(CONVERSATION[3:5]) in prompt
    assert HERMES.render_tool_results(CONVERSATION[8:9]) in prompt
    assert "Need the listing" not in prompt  # SmolLM2 prints no reasoning, for any turn


@pytest.mark.parametrize("turn,first_result", TOOL_LOOP_TURNS)
def test_tool_loop_prompt_extends_previous_prompt_and_output(turn, first_result):
    before = chat().render(CONVERSATION[:turn], TOOLS)
    assert not HERMES.starts_in_reasoning(before)
    output = HERMES.render_output(replace(CONVERSATION[turn], reasoning=None))
    parsed = HERMES.parse(output, "req", TOOLS)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [(c.name, c.arguments)
                                                                 for c in CONVERSATION[turn].tool_calls]
    after = chat().render(CONVERSATION[:first_result + 1], TOOLS)
    assert after.startswith(before + output + "<|im_end|>\n")


def test_without_tools_the_template_renders_unchanged():
    messages = [Message("user", "Hi"), Message("assistant", "Hello!"), Message("user", "Bye")]
    expected, _ = render_jinja_template(conversations=[[hf_message(m) for m in messages]], chat_template=SMOLLM2,
                                        add_generation_prompt=True)
    assert chat().render(messages, ()) == expected[0]


def test_dialects_without_a_plain_form_refuse_tools_there():
    with pytest.raises(ValueError, match="renders no tools and the glm45 dialect"):
        ChatTemplate(SMOLLM2, dialect_named("glm45")).render(CONVERSATION[:2], TOOLS)


def test_a_gguf_files_template_and_dialect_are_read_from_its_metadata(tmp_path):
    path = write_tokenizer_gguf(tmp_path / "m.gguf", ["a", "b", "<|im_end|>"], ["a b"], [1, 1, 3], "gpt-2",
                                template=SMOLLM2)
    assert dialect_for(path).name == "hermes"
    prompt = prompt_for(path)
    assert prompt.source == SMOLLM2 and prompt.render(CONVERSATION[:2], TOOLS) == chat().render(CONVERSATION[:2], TOOLS)
