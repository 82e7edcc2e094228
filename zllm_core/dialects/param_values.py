"""Parameter values for dialects that put each argument between its own tags (DSML, GLM).

Templates print values raw, so a value holding the value's closing tag (in any spelling the parser
accepts) would end early when parsed back. Such a value, and only such a value, is printed as JSON
with `<` and `&` escaped (`\u003c`, `\u0026`: valid JSON, same value) so that no tag survives; the
parser recognises exactly that spelling and restores the original text. A string that merely looks
escaped is escaped one level deeper, so the rule is reversible for every value.
"""
from __future__ import annotations

import json
import re
from typing import Sequence

from .conversation import FunctionTool
from .json_args import is_json, to_json
from .scanner import Markers
from .stream import ArgsWriter, StreamParser


_ESCAPED = re.compile(r"(\\*)\\u00(3c|26)")


def _unescape_json(text: str) -> str:
    """Undo `escape_json`: only a `\\u` preceded by an even run of backslashes is an escape."""
    def restore(m: re.Match) -> str:
        if len(m.group(1)) % 2:
            return m.group()
        return m.group(1) + ("<" if m.group(2) == "3c" else "&")
    return _ESCAPED.sub(restore, text)


def escape_json(text: str) -> str:
    """`<` and `&` occur in JSON text only inside strings, where their \\u escapes mean the same."""
    return text.replace("<", "\\u003c").replace("&", "\\u0026")


def escape_form(value: str) -> str:
    return escape_json(to_json(value))


class StringSafety:
    def __init__(self, closer: Markers):
        self._closer = closer

    def json_string(self, value: str) -> str | None:
        """The JSON spelling `value` must take to survive a round trip, or None to print it raw."""
        return escape_form(value) if self._needs_json(value) else None

    def json_value(self, raw: str) -> str:
        """How to print a non-string value's JSON text."""
        return escape_json(raw) if self._has_closer(raw) else raw

    def unescape_json(self, printed: str) -> str:
        """The JSON text `json_value` printed as `printed` (itself if it was printed as is)."""
        if "\\u003c" not in printed and "\\u0026" not in printed:
            return printed
        raw = _unescape_json(printed)
        if self._has_closer(raw) and escape_json(raw) == printed and is_json(raw):
            return raw
        return printed

    def _has_closer(self, text: str) -> bool:
        return self._closer.scan(text, final=True)[1] is not None

    def decode(self, raw: str) -> str | None:
        """The string `raw` spells if it is exactly the escaped form of a value that needed it."""
        if not raw.startswith('"'):
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        if isinstance(value, str) and self._needs_json(value) and escape_form(value) == raw:
            return value
        return None

    def _needs_json(self, value: str) -> bool:
        while True:
            if self._has_closer(value):
                return True
            if not value.startswith('"'):
                return False
            try:
                value = json.loads(value)
            except ValueError:
                return False
            if not isinstance(value, str):
                return False


class ParamReader:
    """Reads one value between its tags and writes it into the argument JSON.

    kind: "string" (schema says string: streamed as a JSON string), "json" (must be JSON),
    "auto" (JSON if it parses, else a string; for parameters the schema does not type).
    A string value that starts with a quote is held whole, as it may be an escaped form.
    """

    def __init__(self, args: ArgsWriter, safety: StringSafety, kind: str):
        self._args, self._safety, self._kind = args, safety, kind
        self._held: list[str] = []  # chunks of a value read whole (joined once: values can be long)
        self._streaming = False

    def write(self, text: str) -> None:
        if not text:
            return
        if not self._streaming and not self._held and self._kind == "string" and not text.startswith('"'):
            self._streaming = True
            self._args.string_open()
        if self._streaming:
            self._args.string_part(text)
        else:
            self._held.append(text)

    def close(self) -> str | None:
        """Finish the value; returns a problem description if it cannot be JSON as required."""
        if self._streaming:
            self._args.string_close()
            return None
        member, problem = self._member("".join(self._held))
        if member is not None:
            self._args.raw(member)
        return problem

    def _member(self, raw: str) -> tuple[str | None, str | None]:
        decoded = self._safety.decode(raw)
        if decoded is not None:
            return to_json(decoded), None
        if self._kind == "string":
            return to_json(raw), None
        if is_json(raw):
            return self._safety.unescape_json(raw), None
        if self._kind == "auto":
            return to_json(raw), None
        return None, f"parameter value is not valid JSON: {raw[:80]!r}"


class ParamParser(StreamParser):
    """A stream parser for dialects with one tag pair per parameter value."""
    value_end: Markers  # what ends a value (a fence keeps raw values clear of it)
    _safety: StringSafety

    def __init__(self, scope: str, tools: Sequence[FunctionTool], in_reasoning: bool):
        super().__init__(scope, tools, in_reasoning)
        self._value: ParamReader | None = None
        self._problem: str | None = None  # why the current call's arguments are unusable

    def _after_value_state(self) -> bool:
        raise NotImplementedError

    def _begin_value(self, key: str, kind: str) -> None:
        self._args.key(key)
        self._value = ParamReader(self._args, self._safety, kind)
        self._state = self._value_state

    def _value_state(self) -> bool:
        text, tag = self._scan(self.value_end)
        self._value.write(text)
        if tag is None:
            return False
        self._problem = self._value.close() or self._problem
        self._state = self._after_value_state
        return True

    def _finish_call(self) -> None:
        self._args.close()
        self._end_call(self._problem)
        self._problem = None
