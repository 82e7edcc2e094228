"""ToolDialect: the one place a model family's tool-call syntax lives.

Each dialect owns four operations that must agree byte for byte with the family's official chat
template, because a tool call is parsed from model text and later rendered back into the next
prompt; if the two are not inverses, the prompt forks at the call and the prefix cache misses:
  (a) `render_tools`        how function schemas enter the prompt,
  (b) `render_output`       an assistant turn (reasoning, text, tool calls) as the model writes it,
  (c) `render_tool_results` a run of tool results,
  (d) `stream_parser`       model output back into reasoning, text and calls.
`parse` is (d) over a whole text; `parse(render_output(m)) == m` and
`render_output(parse(t)) == t` for every `t` the dialect renders.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

from .conversation import FunctionTool, Message, ToolCall
from .events import ParsedOutput
from .json_args import template_arguments
from .scanner import Markers
from .stream import StreamParser


class ToolDialect(ABC):
    name: str
    # What the generation prompt ends with when the model starts inside its reasoning.
    reasoning_prompt_suffix: str
    text_stops: Markers  # what free text must not contain: what opens a call, in every spelling read

    @abstractmethod
    def render_tools(self, tools: Sequence[FunctionTool]) -> str: ...

    @abstractmethod
    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str: ...

    @abstractmethod
    def render_output(self, message: Message, in_reasoning: bool = False) -> str: ...

    @abstractmethod
    def render_tool_results(self, results: Sequence[Message]) -> str: ...

    parser_class: type[StreamParser]

    def stream_parser(self, scope: str, tools: Sequence[FunctionTool] | None = (),
                      in_reasoning: bool = False) -> StreamParser:
        """A parser for one generation; `scope` (e.g. the request id) seeds its tool-call ids."""
        return self.parser_class(scope, tools, in_reasoning)

    def json_string(self, value: str) -> str | None:
        """The JSON spelling a string argument must take to stay parseable, or None to print it raw."""
        return None

    def json_value(self, raw: str) -> str:
        """The spelling of a non-string argument's JSON text in this dialect's output."""
        return raw

    def parse(self, text: str, scope: str, tools: Sequence[FunctionTool] | None = (),
              in_reasoning: bool = False) -> ParsedOutput:
        parser = self.stream_parser(scope, tools, in_reasoning)
        return ParsedOutput.fold([*parser.feed(text), *parser.finish()])

    def starts_in_reasoning(self, prompt: str) -> bool:
        """Whether generation after this rendered prompt begins inside a reasoning block."""
        return bool(self.reasoning_prompt_suffix) and prompt.endswith(self.reasoning_prompt_suffix)

    def inline_tools(self, messages: Sequence[Message], tools: Sequence[FunctionTool]) -> list[Message]:
        """The conversation for a template that renders no tools, with tools, calls and results
        as plain turns; only a dialect with such a convention (Hermes, over ChatML) can."""
        if tools or any(m.tool_calls or m.role == "tool" for m in messages):
            raise ValueError(f"the chat template renders no tools and the {self.name} dialect has no "
                             "plain-text form for them")
        return list(messages)

    def template_message(self, message: Message) -> dict[str, Any]:
        """A message in the dict shape Hugging Face chat templates read."""
        out: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.reasoning is not None:
            out["reasoning_content"] = message.reasoning
        if message.tool_calls:
            out["tool_calls"] = [self._template_call(c) for c in message.tool_calls]
        if message.tool_call_id is not None:
            out["tool_call_id"] = message.tool_call_id
        if message.name is not None:
            out["name"] = message.name
        return out

    def _template_call(self, call: ToolCall) -> dict[str, Any]:
        arguments = template_arguments(call.arguments, self.json_string, self.json_value)
        return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}
