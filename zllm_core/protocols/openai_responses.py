"""OpenAI Responses requests: input items and their conversion to the canonical form.

Consecutive assistant-side items (reasoning, assistant message, function calls) form one canonical
assistant turn, exactly as Chat and Anthropic deliver the same turn. Namespace-wrapped tools are
expanded into functions named `<namespace>__<name>`; hosted tools the runtime cannot execute
(web_search, file_search, ...) are skipped.
"""
from __future__ import annotations

import base64
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from zllm_core.engine.sampling_params import MAX_LOGPROBS
from zllm_core.protocols.canonical import (
    CanonicalRequest, FunctionTool, Message, RequestError, ToolCall, ToolChoice,
    named_tool_choice, sampling,
)
from zllm_core.protocols.message_memo import MessageMemo
from zllm_core.protocols.tool_schema import function_tool, response_format

OUTPUT_LOGPROBS = "message.output_text.logprobs"

NAMESPACE_SEP = "__"


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class TextPart(_Tolerant):
    type: Literal["input_text", "output_text", "text", "summary_text", "reasoning_text"]
    text: str


class OtherPart(_Tolerant):
    """input_image, input_file, ...: accepted by the schema so the error can name the part."""

    type: Literal["input_image", "input_file", "input_audio", "refusal"]


Part = Union[TextPart, OtherPart]


class MessageItem(_Tolerant):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Union[str, list[Part]]


class FunctionCallItem(_Tolerant):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None


class FunctionCallOutputItem(_Tolerant):
    type: Literal["function_call_output"]
    call_id: str
    output: Union[str, list[Part]]


class ReasoningItem(_Tolerant):
    type: Literal["reasoning"]
    summary: list[TextPart] = []
    content: list[TextPart] | None = None
    encrypted_content: str | None = None

    def text(self) -> str:
        """The reasoning as the model wrote it: its content, else our opaque copy, else the summary."""
        if self.content is not None:
            return "".join(p.text for p in self.content)
        if self.encrypted_content:
            return opened_reasoning(self.encrypted_content)
        return "".join(p.text for p in self.summary)


def sealed_reasoning(text: str) -> str:
    """The reasoning as `encrypted_content`: clients that keep no state (store: false, Codex)
    send it back, so the next prompt renders the same reasoning. Opaque, not secret."""
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii")


def opened_reasoning(blob: str) -> str:
    try:
        return base64.urlsafe_b64decode(blob.encode("ascii")).decode("utf-8")
    except (ValueError, UnicodeError):
        return ""  # another server's blob: nothing of it can be rendered


class OtherItem(_Tolerant):
    """Hosted tool calls and references the runtime did not produce; they add nothing to the prompt."""

    type: str


def _item_kind(v: Any) -> str:
    kind = v.get("type", "message") if isinstance(v, dict) else getattr(v, "type", "message")
    return kind if kind in ("message", "function_call", "function_call_output", "reasoning") else "other"


InputItem = Annotated[
    Union[Annotated[MessageItem, Tag("message")], Annotated[FunctionCallItem, Tag("function_call")],
          Annotated[FunctionCallOutputItem, Tag("function_call_output")],
          Annotated[ReasoningItem, Tag("reasoning")], Annotated[OtherItem, Tag("other")]],
    Discriminator(_item_kind)]


class FunctionToolParam(_Tolerant):
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class NamespaceTool(_Tolerant):
    type: Literal["namespace"]
    name: str = Field(min_length=1)
    description: str | None = None
    tools: list[Annotated[Union[Annotated[FunctionToolParam, Tag("function")],
                                Annotated["HostedTool", Tag("other")]],
                          Discriminator(lambda v: "function" if _tool_kind(v) == "function" else "other")]]


class HostedTool(_Tolerant):
    type: str


def _tool_kind(v: Any) -> str:
    kind = v.get("type") if isinstance(v, dict) else getattr(v, "type", None)
    return kind if kind in ("function", "namespace") else "other"


ToolParam = Annotated[
    Union[Annotated[FunctionToolParam, Tag("function")], Annotated[NamespaceTool, Tag("namespace")],
          Annotated[HostedTool, Tag("other")]],
    Discriminator(_tool_kind)]
NamespaceTool.model_rebuild()


class NamedToolChoice(_Tolerant):
    type: str
    name: str | None = None


INPUT = MessageMemo()  # resent input items are validated and converted once


class ResponsesRequest(_Tolerant):
    model: str
    input: Annotated[Union[str, list[InputItem]], INPUT.validator()]
    instructions: str | None = None
    tools: list[ToolParam] | None = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    store: bool | None = True
    stream: bool | None = False
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    prompt_cache_key: str | None = None
    include: list[str] | None = None
    text: dict[str, Any] | None = None  # {"format": {"type": "text" | "json_object" | "json_schema", ...}}
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    reasoning: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


def function_tools(req: ResponsesRequest) -> list[FunctionTool]:
    """Executable functions, namespaces expanded; hosted tools skipped."""
    out = []
    for i, tool in enumerate(req.tools or []):
        if isinstance(tool, FunctionToolParam):
            out.append(function_tool(tool.name, tool.description, tool.parameters,
                                     f"tools[{i}].parameters"))
        elif isinstance(tool, NamespaceTool):
            out += [function_tool(NAMESPACE_SEP.join((tool.name, t.name)), t.description,
                                  t.parameters, f"tools[{i}].tools[{j}].parameters")
                    for j, t in enumerate(tool.tools) if isinstance(t, FunctionToolParam)]
    return out


def split_name(qualified: str, req: ResponsesRequest) -> tuple[str | None, str]:
    """A model-side function name back to (namespace, name) for the function_call item."""
    for tool in req.tools or []:
        if isinstance(tool, NamespaceTool) and qualified.startswith(tool.name + NAMESPACE_SEP):
            return tool.name, qualified[len(tool.name) + len(NAMESPACE_SEP):]
    return None, qualified


def _text(content: Union[str, list[Part]], where: str) -> str:
    if isinstance(content, str):
        return content
    for j, part in enumerate(content):
        if isinstance(part, OtherPart):
            raise RequestError(f"{where}.content[{j}]: content type '{part.type}' is not supported "
                               "by this model (text only)", param=f"{where}.content[{j}]")
    return "".join(p.text for p in content)


class _AssistantTurn:
    """Consecutive reasoning, assistant message and function_call items: one assistant message."""

    def __init__(self) -> None:
        self.reasoning: str | None = None
        self.content = ""
        self.calls: list[ToolCall] = []

    def takes(self, item: Any) -> bool:
        if isinstance(item, ReasoningItem):
            return self.reasoning is None and not self.content and not self.calls
        if isinstance(item, MessageItem):
            return not self.content and not self.calls
        return True

    def add(self, item: Any, where: str) -> None:
        if isinstance(item, ReasoningItem):
            self.reasoning = item.text()
        elif isinstance(item, MessageItem):
            self.content = _text(item.content, where)
        else:
            name = NAMESPACE_SEP.join((item.namespace, item.name)) if item.namespace else item.name
            self.calls.append(ToolCall(id=item.call_id, name=name, arguments=item.arguments))

    def message(self) -> Message:
        return Message(role="assistant", content=self.content, reasoning=self.reasoning,
                       tool_calls=tuple(self.calls))


def _is_assistant_side(item: Any) -> bool:
    return isinstance(item, (ReasoningItem, FunctionCallItem)) or (
        isinstance(item, MessageItem) and item.role == "assistant")


def input_messages(req: ResponsesRequest) -> list[Message]:
    """The request's own input items as canonical messages (without instructions or history)."""
    if isinstance(req.input, str):
        return [Message(role="user", content=req.input)]
    return INPUT.convert(req.input, _items_messages)


def _items_messages(items: list[Any], start: int) -> tuple[list[Message], list[int]]:
    """A later request may add items to an assistant turn still open at the end, so the
    conversion restarts only where no turn is open (the memo's cuts)."""
    out: list[Message] = []
    cuts: list[int] = []
    turn: _AssistantTurn | None = None
    for i, item in enumerate(items):
        where = f"input[{start + i}]"
        if turn is not None and not (_is_assistant_side(item) and turn.takes(item)):
            out.append(turn.message())
            turn = None
        cuts.append(len(out) if turn is None else -1)
        if _is_assistant_side(item):
            turn = turn or _AssistantTurn()
            turn.add(item, where)
        elif isinstance(item, MessageItem):
            role = "system" if item.role == "developer" else item.role
            out.append(Message(role=role, content=_text(item.content, where)))
        elif isinstance(item, FunctionCallOutputItem):
            out.append(Message(role="tool", content=_text(item.output, where),
                               tool_call_id=item.call_id))
    cuts.append(len(out) if turn is None else -1)
    if turn is not None:
        out.append(turn.message())
    return out, cuts


def _tool_choice(req: ResponsesRequest, tools: list[FunctionTool]) -> ToolChoice:
    parallel = req.parallel_tool_calls is not False
    choice = req.tool_choice
    if isinstance(choice, NamedToolChoice):
        if choice.type != "function" or not choice.name:
            return ToolChoice("auto" if tools else "none", None, parallel)
        return named_tool_choice(choice.name, tools, parallel)
    return ToolChoice(choice or ("auto" if tools else "none"), None, parallel)


def to_canonical(req: ResponsesRequest, history: list[Message],
                 chain_key: str | None = None) -> CanonicalRequest:
    """`history` is the stored conversation of previous_response_id (empty without one);
    `chain_key` names the whole previous_response_id chain for the prefix cache."""
    system = [Message(role="system", content=req.instructions)] if req.instructions else []
    tools = function_tools(req)
    wants = OUTPUT_LOGPROBS in (req.include or []) or req.top_logprobs is not None
    params = sampling(temperature=req.temperature, top_p=req.top_p,
                      logprobs=(req.top_logprobs or 0) if wants else None)
    effort = (req.reasoning or {}).get("effort")
    return CanonicalRequest(
        messages=system + history + input_messages(req), tools=tools, sampling=params,
        tool_choice=_tool_choice(req, tools), stream=bool(req.stream),
        cache_key=req.prompt_cache_key or chain_key,
        thinking=None if effort is None else effort != "none",
        max_tokens_requested=req.max_output_tokens,
        response_format=response_format((req.text or {}).get("format"), "text.format", "schema"),
        held=INPUT.held(req.input))
