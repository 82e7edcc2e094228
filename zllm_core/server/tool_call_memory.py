"""The argument text of tool calls the server emitted, by call id.

Anthropic clients echo a call back as a parsed object; re-serializing it can change spacing or
number spelling and fork the next prompt at the call. Remembering the model's own text lets the
echo render exactly as generated (the dialects keep it only while it still means the same JSON).
"""
from __future__ import annotations

from collections import OrderedDict

from zllm_core.protocols.canonical import OutputEvent, ToolCallArgsDelta, ToolCallEnd, ToolCallStart


class ToolCallMemory:
    def __init__(self, capacity: int = 65536):
        self.capacity = capacity
        self._text: OrderedDict[str, str] = OrderedDict()

    def get(self, call_id: str) -> str | None:
        return self._text.get(call_id)

    def watch(self) -> "CallRecorder":
        """A recorder for one generation's events."""
        return CallRecorder(self)

    def put(self, call_id: str, text: str) -> None:
        self._text[call_id] = text
        while len(self._text) > self.capacity:
            self._text.popitem(last=False)


class CallRecorder:
    def __init__(self, memory: ToolCallMemory):
        self.memory = memory
        self._open: dict[int, tuple[str, list[str]]] = {}

    def see(self, ev: OutputEvent) -> None:
        if isinstance(ev, ToolCallStart):
            self._open[ev.index] = (ev.id, [])
        elif isinstance(ev, ToolCallArgsDelta) and ev.index in self._open:
            self._open[ev.index][1].append(ev.delta)
        elif isinstance(ev, ToolCallEnd) and ev.index in self._open:
            call_id, parts = self._open.pop(ev.index)
            self.memory.put(call_id, "".join(parts))
