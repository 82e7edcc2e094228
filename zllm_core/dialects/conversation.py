"""Canonical conversation values: what every client protocol converts into and every dialect renders.

Tool-call arguments are kept as the exact JSON text (not a decoded dict): a call parsed from model
output must re-render byte for byte, and decoding then re-encoding JSON loses spacing and number
spelling, which forks the prompt at the tool call.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

Role = Literal["system", "developer", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON object text exactly as the model (or the client) wrote it


@dataclass(frozen=True)
class Message:
    role: Role
    content: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def openai_dict(self) -> dict[str, Any]:
        """The `{"type": "function", "function": ...}` shape chat templates serialize into the prompt.

        `description` is omitted when absent, as the client omitted it: templates print the dict
        with tojson, so an invented `"description": null` would change the prompt bytes.
        """
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}

    def parameter_type(self, key: str) -> str | None:
        """The JSON-schema type of one parameter, when the schema states a single one."""
        prop = self.parameters.get("properties", {}).get(key)
        kind = prop.get("type") if isinstance(prop, Mapping) else None
        return kind if isinstance(kind, str) else None


def arguments_text(value: Any, remembered: str | None = None) -> str:
    """Argument text for a call a client returned as an object (Anthropic `input`, not a string).

    `remembered` is the text the call had when we emitted it (e.g. looked up by call id): it is kept
    while it still says exactly the same, so the call re-renders byte for byte; otherwise the object
    is serialized the way the dialects' parsers write arguments.
    """
    if remembered is not None:
        try:
            if _same_json(json.loads(remembered), value):
                return remembered
        except ValueError:
            pass
    return json.dumps(value, ensure_ascii=False)


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON documents (Python's == also equates 1, 1.0 and True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same_json, a, b))
    return a == b
