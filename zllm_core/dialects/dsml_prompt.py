"""The DeepSeek-V3.2 prompt: the reference encoder's layout around the DSML dialect's pieces.

V3.2 ships no Jinja template; this follows encoding_dsv32.py (thinking mode drops reasoning of
turns before the last user message, and the generation prompt is already part of the last user
message or tool-result block: `<｜Assistant｜><think>` or `</think>`).
"""
from __future__ import annotations

from typing import Any, Sequence

from .conversation import FunctionTool, Message
from .dsml import BOS, EOS, RESULTS_CLOSE, RESULTS_OPEN, THINK_CLOSE, THINK_OPEN, DsmlDialect

USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"


class DsmlPrompt:
    name = "the DeepSeek-V3.2 encoder layout"
    literals: tuple[str, ...] = ()  # it never branches on what content says

    def __init__(self, dialect: DsmlDialect | None = None):
        self.dialect = dialect or DsmlDialect()

    def render(self, messages: Sequence[Message], tools: Sequence[FunctionTool] | None = (),
               add_generation_prompt: bool = True, thinking: bool = True,
               enable_thinking: bool | None = None, **_: Any) -> str:
        """`add_generation_prompt` is implied: user and tool turns end in the assistant's opening.
        `enable_thinking` (the Qwen/GLM template kwarg) is accepted as a synonym of `thinking`."""
        thinking = thinking if enable_thinking is None else enable_thinking
        tools = tools or ()
        messages = list(messages)
        if tools and (not messages or messages[0].role != "system"):
            messages.insert(0, Message("system"))
        last_user = max((i for i, m in enumerate(messages) if m.role in ("user", "developer")), default=-1)
        parts = [BOS]
        calls_open = 0  # results still owed to the latest assistant turn's calls
        for i, m in enumerate(messages):
            think = THINK_OPEN if thinking and i >= last_user else THINK_CLOSE
            if m.role == "system":
                parts.append(m.content + ("\n\n" + self.dialect.render_tools(tools) if tools and i == 0 else ""))
            elif m.role in ("user", "developer"):
                text = m.content if m.role == "user" else "\n\n# The user's message is: " + m.content
                parts.append(f"{USER}{text}{ASSISTANT}{THINK_OPEN if thinking and i == last_user else THINK_CLOSE}")
            elif m.role == "assistant":
                calls_open = len(m.tool_calls)
                parts.append(self.dialect.render_output(m, in_reasoning=thinking and i > last_user) + EOS)
            else:
                parts.append(self._result(messages, i, calls_open, think))
        return "".join(parts)

    def _result(self, messages: list[Message], i: int, calls: int, think: str) -> str:
        order = 1
        while messages[i - order].role == "tool":
            order += 1
        text = (RESULTS_OPEN if order == 1 else "") + self.dialect.render_result(messages[i].content)
        if order == calls:
            text += RESULTS_CLOSE + "\n\n" + think
        return text
