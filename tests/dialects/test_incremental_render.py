"""Incremental rendering: every call of a growing conversation renders exactly what the template
renders for the whole conversation, while continuations render only their window."""
from __future__ import annotations

import json
import random

import pytest

from zllm_core.dialects import ChatTemplate, DsmlPrompt, FunctionTool, Message, ToolCall, dialect_named
from zllm_core.dialects.chat_template import content_literals
from zllm_core.dialects.incremental_render import IncrementalRenderer
from zllm_core.rope import Rope, flat

from .sample import TEMPLATES

FAMILIES = {"qwen3.jinja": "hermes", "glm46.jinja": "glm45", "glm47.jinja": "glm47", "smollm2.jinja": "hermes"}
TOOLS = [FunctionTool("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}),
         FunctionTool("bash", None, {"type": "object", "properties": {"cmd": {"type": "string"}}})]
# Templates whose own layout re-renders history or depends on the whole conversation in ways a
# window cannot stand in for: they render every conversation whole (none of the vendored ones).
NOT_INCREMENTAL: set[str] = set()


def prompts() -> dict[str, object]:
    out = {name: ChatTemplate((TEMPLATES / name).read_text(encoding="utf-8"), dialect_named(d), name=name)
           for name, d in FAMILIES.items()}
    out["dsml"] = DsmlPrompt()
    return out


def tools_for(name: str) -> list[FunctionTool]:
    return [] if name == "smollm2.jinja" else TOOLS  # SmolLM2's ChatML has no tool layout


def agent_session(rng: random.Random, turns: int, tools: bool, reasoning: bool) -> list[list[Message]]:
    """The message lists an agent sends, one per call: each the previous one plus the model's
    answer and what came back (tool results, or a new question). Objects are reused across
    calls, as the protocol memo hands them over."""
    history = [Message("system", "You are a coding agent. " * rng.randint(1, 20)),
               Message("user", rng.choice(["Fix the bug.", "<tool_response>x</tool_response>",
                                           "Read setup.py and explain </think> it."]))]
    calls = [list(history)]
    for turn in range(turns):
        think = rng.choice(["", "Let me look.", "\nplan\n"]) if reasoning else None
        if tools and rng.random() < 0.7:
            n = rng.randint(1, 2)
            batch = tuple(ToolCall(f"call_{turn}_{j}", rng.choice(["read_file", "bash"]),
                                   json.dumps({"path": f"f{turn}.py"})) for j in range(n))
            history.append(Message("assistant", rng.choice(["", "Looking."]), think or None, batch))
            history += [Message("tool", rng.choice(["ok", "", "a\nb", "<tool_response>z</tool_response>"]),
                                tool_call_id=c.id) for c in batch]
        else:
            answer = rng.choice(["Done.", "", "<think>old</think>Done.", "Here:\n```py\nx = 1\n```"])
            history.append(Message("assistant", answer, think or None))
            history.append(Message("user", rng.choice(["Thanks, next.", "<tool_response>q</tool_response>", "  "])))
        calls.append(list(history))
    return calls


def replay(renderer: IncrementalRenderer, template, calls: list[list[Message]], tools, **options) -> None:
    for messages in calls:
        expected = template.render(messages, tools, add_generation_prompt=True, **options)
        assert flat(renderer.render(messages, tools, **options).text) == expected


@pytest.mark.parametrize("name", [*FAMILIES, "dsml"])
@pytest.mark.parametrize("seed", range(6))
def test_every_call_renders_like_the_whole_template(name, seed):
    template = prompts()[name]
    renderer = IncrementalRenderer(template, shadow_every=0)
    rng = random.Random(seed)
    tools = tools_for(name)
    reasoning = name != "smollm2.jinja" and seed % 2 == 0
    for session in range(3):
        replay(renderer, template, agent_session(rng, 12, bool(tools), reasoning), tools)
    stats = renderer.stats
    assert stats.shadow_failures == 0
    if name not in NOT_INCREMENTAL:
        assert renderer.incremental
        assert stats.incremental > 0


@pytest.mark.parametrize("name", ["qwen3.jinja", "glm47.jinja"])
def test_options_are_part_of_the_conversation(name):
    template = prompts()[name]
    renderer = IncrementalRenderer(template, shadow_every=0)
    calls = agent_session(random.Random(1), 6, True, True)
    for messages in calls:
        for thinking in (True, False):
            expected = template.render(messages, TOOLS, enable_thinking=thinking)
            assert flat(renderer.render(messages, TOOLS, enable_thinking=thinking).text) == expected


def test_a_long_tool_loop_renders_its_window_only():
    """Hundreds of calls: after the first, each renders a window of a few messages."""
    template = prompts()["qwen3.jinja"]
    calls = agent_session(random.Random(3), 150, True, True)
    rendered = []

    class Counting:
        name, literals = template.name, template.literals

        def render(self, messages, tools=(), add_generation_prompt=True, **kw):
            rendered.append(len(messages))
            return template.render(messages, tools, add_generation_prompt, **kw)

    renderer = IncrementalRenderer(Counting(), shadow_every=0)
    previous, extended = None, 0
    for messages in calls:
        out = renderer.render(messages, TOOLS)
        assert flat(out.text) == template.render(messages, TOOLS)
        # A continuation is a rope over the previous prompt object: the history is not copied.
        extended += isinstance(out.text, Rope) and previous is not None and out.prefix is previous.text
        previous = out
    whole = sum(1 for n in rendered if n > 40)
    assert renderer.stats.incremental > 100 and extended > 100
    assert whole <= 2 * renderer.stats.shapes_checked + renderer.stats.forks + 2


def test_a_changed_history_renders_whole():
    """A client that edits an earlier message gets the template's render of what it sent."""
    template = prompts()["qwen3.jinja"]
    renderer = IncrementalRenderer(template, shadow_every=0)
    calls = agent_session(random.Random(5), 8, True, False)
    for messages in calls:
        renderer.render(messages, TOOLS)
    edited = list(calls[-1])
    edited[3] = Message("user", "something else")
    assert flat(renderer.render(edited, TOOLS).text) == template.render(edited, TOOLS)
    fewer_tools = TOOLS[:1]
    assert flat(renderer.render(calls[-1], fewer_tools).text) == template.render(calls[-1], fewer_tools)


def test_scopes_do_not_share_conversations():
    template = prompts()["qwen3.jinja"]
    renderer = IncrementalRenderer(template, shadow_every=0)
    calls = agent_session(random.Random(6), 4, True, False)
    for messages in calls:
        renderer.render(messages, TOOLS, scope="a")
    before = renderer.stats.full
    renderer.render(calls[-1], TOOLS, scope="b")
    assert renderer.stats.full == before + 1


def test_a_template_whose_window_lies_renders_whole():
    """A template that numbers every turn cannot be stood in for by a window: its shapes fail
    their check, every call still renders exactly, and it is named once it gives up."""
    source = ("{% for m in messages %}[Round {{ loop.index }}] {{ m.role }}: {{ m.content }}\n{% endfor %}"
              "{% if add_generation_prompt %}assistant:{% endif %}")
    template = ChatTemplate(source, dialect_named("hermes"), name="numbered")
    renderer = IncrementalRenderer(template, shadow_every=0)
    for seed in range(4):
        replay(renderer, template, agent_session(random.Random(seed), 12, False, False), [])
    assert renderer.stats.shapes_failed > 0


def test_the_shadow_render_catches_a_wrong_window():
    """A template that reads a message far outside the window (here the second one's content in
    every later turn) passes a check whose sample does not show it; the shadow render does."""
    source = ("{% for m in messages %}{{ m.role }}:{{ m.content }}"
              "{% if loop.index0 > 6 and messages[1].content == 'magic' %}*{% endif %}\n{% endfor %}")
    template = ChatTemplate(source, dialect_named("hermes"), name="far-reader")
    renderer = IncrementalRenderer(template, shadow_every=1)
    history = [Message("system", "s"), Message("user", "plain")]
    for i in range(12):
        history = history + [Message("assistant", f"a{i}"), Message("user", f"u{i}")]
        renderer.render(history, [])
    renderer.flush()
    assert renderer.incremental  # so far every sample agreed
    magic = [Message("system", "s"), Message("user", "magic")]
    for i in range(12):
        magic = magic + [Message("assistant", f"a{i}"), Message("user", f"u{i}")]
        renderer.render(magic, [])
    renderer.flush()
    assert renderer.stats.shadow_failures > 0 and not renderer.incremental


def test_templates_that_branch_on_content_name_their_literals():
    assert content_literals((TEMPLATES / "qwen3.jinja").read_text()) == (
        "</think>", "</tool_response>", "<think>", "<tool_response>")
    assert content_literals((TEMPLATES / "smollm2.jinja").read_text()) == ()
