"""A tool dialect renders calls as the model writes them and parses its output back, whole
or streamed piece by piece."""
from zllm_core import FunctionTool, ToolCall, dialect_named

hermes = dialect_named("hermes")
tools = [FunctionTool("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})]

text = hermes.render_tool_calls([ToolCall("call_1", "read_file", '{"path": "README.md"}')])
print(text)

parsed = hermes.parse(text, scope="example", tools=tools)
(call,) = parsed.tool_calls
assert (call.name, call.arguments) == ("read_file", '{"path": "README.md"}')

parser = hermes.stream_parser("example", tools)  # the same events, as the text streams in
events = [ev for piece in (text[:9], text[9:30], text[30:]) for ev in parser.feed(piece)] + parser.finish()
print([type(ev).__name__ for ev in events])
