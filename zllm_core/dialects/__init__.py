"""Tool dialects and chat templates: conversation values <-> the exact text a model reads and writes."""
from .chat_template import ChatTemplate
from .conversation import FunctionTool, Message, Role, ToolCall, arguments_text
from .dialect import ToolDialect
from .dsml import DsmlDialect
from .dsml_prompt import DsmlPrompt
from .events import (Event, ParsedOutput, ParseError, ReasoningDelta, Repair, TextDelta, ToolCallArgsDelta,
                     ToolCallEnd, ToolCallStart)
from .glm import GlmDialect
from .hermes import HermesDialect
from .model_prompt import prompt_for
from .selection import DIALECTS, dialect_for, dialect_named
from .stream import StreamParser, tool_call_id

__all__ = [
    "ChatTemplate", "DIALECTS", "DsmlDialect", "DsmlPrompt", "Event", "FunctionTool", "GlmDialect",
    "HermesDialect", "Message", "ParseError", "ParsedOutput", "ReasoningDelta", "Repair", "Role",
    "StreamParser", "TextDelta", "ToolCall", "ToolCallArgsDelta", "ToolCallEnd", "ToolCallStart",
    "ToolDialect", "arguments_text", "dialect_for", "dialect_named", "prompt_for", "tool_call_id",
]
