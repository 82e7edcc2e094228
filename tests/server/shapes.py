"""Request bodies shaped like real agent traffic, built here from what those clients send.

One conversation (system, user, assistant reasoning + tool call, tool result, user) in each of
the three protocols, a Claude Code-shaped Messages request and a Codex-shaped Responses request.
"""
import json

SYSTEM = "You are a careful coding agent."
QUESTION = "What is the weather in Paris?"
REASONING = "The user wants the weather; call the tool."
RESULT = "18C and sunny"
FOLLOW_UP = "Thanks. And tomorrow?"
WEATHER = {"name": "get_weather", "description": "Current weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
ARGS = {"city": "Paris"}


def chat_conversation(model="m"):
    return {"model": model, "tools": [{"type": "function", "function": WEATHER}], "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "reasoning_content": REASONING, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
        {"role": "user", "content": FOLLOW_UP}]}


def anthropic_conversation(model="m"):
    tool = {"name": WEATHER["name"], "description": WEATHER["description"],
            "input_schema": WEATHER["parameters"]}
    return {"model": model, "max_tokens": 8, "system": SYSTEM, "tools": [tool], "messages": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": REASONING, "signature": "sig"},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": ARGS}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": RESULT},
            {"type": "text", "text": FOLLOW_UP}]}]}


def responses_conversation(model="m"):
    return {"model": model, "instructions": SYSTEM, "tools": [{"type": "function", **WEATHER}],
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
                {"type": "reasoning", "id": "rs_1", "summary": [],
                 "content": [{"type": "reasoning_text", "text": REASONING}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": json.dumps(ARGS)},
                {"type": "function_call_output", "call_id": "call_1", "output": RESULT},
                {"role": "user", "content": FOLLOW_UP}]}


CHAT_CONVERSATION = chat_conversation()
ANTHROPIC_CONVERSATION = anthropic_conversation()
RESPONSES_CONVERSATION = responses_conversation()


def _schema(i):
    """A large tool schema, like Claude Code's: nested objects, enums, long descriptions."""
    return {"type": "object", "additionalProperties": False, "required": ["target", "mode"],
            "properties": {
                "target": {"type": "string", "description": f"Absolute path the tool {i} acts on. "
                           "Must be inside the workspace; relative paths are rejected."},
                "mode": {"type": "string", "enum": ["read", "write", "append", "check"]},
                "options": {"type": "object", "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": 2000},
                    "offset": {"type": "integer", "minimum": 0},
                    "patterns": {"type": "array", "items": {"type": "string"}}}}}}


def claude_code_request(model, stream=False):
    tools = [{"name": f"Tool{i}", "description": f"Tool number {i}. " + "Use it carefully. " * 6,
              "input_schema": _schema(i)} for i in range(22)]
    tools.append({"name": "WebSearch", "type": "web_search_20250305", "max_uses": 4})
    tools += [{"name": "Bash", "description": "Run a shell command.", "input_schema": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
        {"name": "Read", "description": "Read a file.", "input_schema": _schema(99)}]
    return {
        "model": model, "max_tokens": 32000, "stream": stream, "temperature": 1,
        "thinking": {"type": "adaptive"},
        "metadata": {"user_id": "user_abc_account_def_session_123"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.3.a1b; "
                                     "cc_entrypoint=cli; cch=9f8e7d6c;"},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Follow the repository conventions. " * 10,
             "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "tools": tools,
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>CLAUDE.md says: run tests.</system-reminder>"},
                {"type": "text", "text": "List the files.", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should run ls.", "signature": "EqQBCkYIBx"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01",
                 "content": [{"type": "text", "text": "README.md\nsrc"}]}]},
            {"role": "system", "content": "The user changed the permission mode to plan."},
            {"role": "user", "content": "Now summarise README.md."}]}


def codex_request(model, stream=False):
    shell = {"type": "function", "name": "shell", "description": "Runs a shell command.",
             "strict": False, "parameters": {"type": "object", "properties": {
                 "command": {"type": "array", "items": {"type": "string"}},
                 "workdir": {"type": "string"}, "timeout_ms": {"type": "number"}},
                 "required": ["command"], "additionalProperties": False}}
    mcp = {"type": "namespace", "name": "mcp_files", "description": "Files MCP server", "tools": [
        {"type": "function", "name": "read_file", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}}}},
        {"type": "function", "name": "list_dir", "parameters": {"type": "object", "properties": {}}}]}
    return {
        "model": model, "instructions": "You are Codex, a coding agent. " * 8,
        "stream": stream, "store": False, "parallel_tool_calls": False, "tool_choice": "auto",
        "reasoning": {"effort": "medium", "summary": "auto"},
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "codex-session-1",
        "text": {"verbosity": "low"},
        "tools": [shell, mcp, {"type": "web_search", "external_web_access": False},
                  {"type": "image_generation"}],
        "input": [
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "<permissions instructions>sandbox: workspace-write"
                                               "</permissions instructions>"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "<environment_context><cwd>/repo</cwd>"
                                               "</environment_context>"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Fix the failing test."}]}]}
