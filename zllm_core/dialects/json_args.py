"""Tool-call arguments as exact JSON text: split into members, rebuild, and present to templates.

A dialect that writes one tag per parameter (DSML, GLM) must print each value exactly as it sits
in the argument text, so we split the object into (key, raw value text) rather than decoding it.
"""
from __future__ import annotations

import json
from typing import Any, Callable

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


def to_json(value: Any) -> str:
    """The reference encoders' and Hugging Face's `tojson`: default separators, no ASCII escaping."""
    return json.dumps(value, ensure_ascii=False)


def escape_fragment(text: str) -> str:
    """JSON string escaping of a fragment; fragments escape independently, so streams concatenate."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def split_members(text: str) -> list[tuple[str, str]] | None:
    """(key, raw value text) for each member of a JSON object text; None if it is not one object."""
    try:
        i = _skip(text, 0)
        if text[i] != "{":
            return None
        i = _skip(text, i + 1)
        members: list[tuple[str, str]] = []
        if text[i] == "}":
            return members if _skip(text, i + 1) == len(text) else None
        while True:
            if text[i] != '"':
                return None
            key, i = json.decoder.scanstring(text, i + 1)
            i = _skip(text, i)
            if text[i] != ":":
                return None
            i = _skip(text, i + 1)
            _, end = _DECODER.raw_decode(text, i)
            members.append((key, text[i:end]))
            i = _skip(text, end)
            if text[i] == "}":
                return members if _skip(text, i + 1) == len(text) else None
            if text[i] != ",":
                return None
            i = _skip(text, i + 1)
    except (ValueError, IndexError):
        return None


def join_members(members: list[tuple[str, str]]) -> str:
    """The argument text a per-parameter dialect's parser produces: `{"k": raw, ...}`."""
    return "{" + ", ".join(f"{to_json(k)}: {raw}" for k, raw in members) + "}"


def is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class _Raw:
    """Marks a decoded value with the exact text it came from, so `tojson` can print that text."""
    raw_json: str


class _RawDict(dict, _Raw):
    pass


class _RawList(list, _Raw):
    pass


class _RawInt(int, _Raw):
    pass


class _RawFloat(float, _Raw):
    pass


class RawText(_Raw):
    """A string value a dialect must print as JSON (it holds the dialect's own delimiters).

    Deliberately not a `str`: templates test `v is string` to choose raw printing, and this value
    must take the `tojson` branch instead.
    """

    def __init__(self, raw_json: str):
        self.raw_json = raw_json

    def __str__(self) -> str:
        return self.raw_json


def _with_raw(value: Any, raw: str) -> Any:
    for kind, wrapper in ((bool, None), (dict, _RawDict), (list, _RawList), (int, _RawInt), (float, _RawFloat)):
        if isinstance(value, kind):
            if wrapper is None:
                return value
            wrapped = wrapper(value)
            wrapped.raw_json = raw
            return wrapped
    return value


def template_arguments(text: str, json_string: Callable[[str], str | None],
                       json_value: Callable[[str], str]) -> Any:
    """The arguments as a mapping for Jinja templates, printing back the exact source text.

    `json_string(s)` returns the JSON spelling a string value must take in this dialect, or None to
    print it raw; `json_value(raw)` the spelling of any other value. Text that is not a JSON object
    is handed over unchanged (templates print strings).
    """
    members = split_members(text)
    if members is None:
        return text
    mapping = _RawDict()
    mapping.raw_json = text
    for key, raw in members:
        value = json.loads(raw)
        if isinstance(value, str):
            spelled = json_string(value)
            mapping[key] = value if spelled is None else RawText(spelled)
        else:
            mapping[key] = _with_raw(value, json_value(raw))
    return mapping


def hf_tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
              separators: Any = None, sort_keys: bool = False) -> str:
    """Hugging Face's `tojson` filter, except that values taken from argument text print that text."""
    raw = getattr(value, "raw_json", None)
    if raw is not None:
        if not ensure_ascii and indent is None and separators is None and not sort_keys:
            return raw
        value = json.loads(raw)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i
