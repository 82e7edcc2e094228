"""A multi-turn agent conversation (parallel calls, results, reasoning) shared by the dialect tests."""
from __future__ import annotations

import json
from pathlib import Path

from zllm_core.dialects import FunctionTool, Message, ToolCall

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"

TOOLS = (
    FunctionTool("list_dir", "List a directory.",
                 {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    FunctionTool("read_file", "Read a file; 读取文件.",
                 {"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}}),
    FunctionTool("run", None,
                 {"type": "object", "properties": {"cmd": {"type": "array", "items": {"type": "string"}},
                                                   "timeout": {"type": "number"}, "env": {"type": "object"}}}),
)

FIRST_CALLS = Message("assistant", "I'll look around.", "Need the listing and setup.py.", (
    ToolCall("call_1", "list_dir", '{"path": "."}'),
    ToolCall("call_2", "read_file", '{"path": "setup.py", "limit": 40}'),
))
SECOND_CALL = Message("assistant", "", "Run the suite.", (
    ToolCall("call_3", "run", '{"cmd": ["pytest", "-q"], "timeout": 60.5, "env": {"CI": true}}'),
))
CONVERSATION = (
    Message("system", "You are a coding agent."),
    Message("user", "List the repo and read setup.py."),
    FIRST_CALLS,
    Message("tool", "setup.py\nsrc/", tool_call_id="call_1"),
    Message("tool", "from setuptools import setup  # <tool_call> is just text here", tool_call_id="call_2"),
    Message("assistant", "The project uses setuptools.", "Enough to answer."),
    Message("user", "Now run the tests."),
    SECOND_CALL,
    Message("tool", "3 passed", tool_call_id="call_3"),
)
# (index of an assistant turn inside the tool loop, index of its first result)
TOOL_LOOP_TURNS = ((2, 3), (7, 8))


def hf_message(m: Message) -> dict:
    """The same message as a plain dict, the way clients hand them to transformers."""
    out: dict = {"role": m.role, "content": m.content}
    if m.reasoning is not None:
        out["reasoning_content"] = m.reasoning
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": json.loads(c.arguments)}}
                             for c in m.tool_calls]
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    return out

