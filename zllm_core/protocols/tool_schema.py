"""Schemas requests carry (function tools, JSON response formats), checked once and alike in
every protocol.

A schema is checked against its JSON Schema meta-schema (the draft its `$schema` names, else
2020-12) before the request reaches the template: a typo such as `"type": "objekt"` is the
client's error, named with the tool and the keyword, never a prompt built from nonsense.
Agents resend the same tools on every call, so each distinct schema is checked once.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from jsonschema import exceptions, validators

from zllm_core.protocols.canonical import FunctionTool, RequestError, ResponseFormat

# What the dialects can print inside their tags unescaped (OpenAI allows [a-zA-Z0-9_-]{1,64}).
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")


def function_tool(name: str, description: str | None, schema: dict[str, Any] | None,
                  param: str) -> FunctionTool:
    """`param` is where the schema sits in the protocol's body (`tools[2].input_schema`)."""
    if not TOOL_NAME.fullmatch(name):
        where = param.rsplit(".", 1)[0] + ".name"
        raise RequestError(f"{where}: tool name {name!r} must match {TOOL_NAME.pattern} (letters, digits, "
                           "_ . : -; at most 128)", param=where)
    schema = schema or {}
    _check(schema, param, f"tool '{name}'")
    return FunctionTool(name=name, description=description, parameters=schema)


def response_format(spec: dict[str, Any] | None, param: str, schema_at: str) -> ResponseFormat | None:
    """Chat's `response_format` / Responses' `text.format`: None for text. `schema_at` is the
    key path of the schema inside `spec` ("json_schema.schema" in Chat, "schema" in Responses)."""
    if spec is not None and not isinstance(spec, dict):
        raise RequestError(f"{param} must be an object with a 'type'", param=param)
    kind = (spec or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat("json_object")
    if kind != "json_schema":
        raise RequestError(f"{param}.type: unknown format '{kind}' (text, json_object or json_schema)",
                           param=f"{param}.type")
    schema: Any = spec
    for key in schema_at.split("."):
        schema = schema.get(key) if isinstance(schema, dict) else None
    where = f"{param}.{schema_at}"
    if not isinstance(schema, dict):
        raise RequestError(f"{where} is required for type 'json_schema' (a JSON Schema object)", param=where)
    _check(schema, where, "the response format")
    return ResponseFormat("json_schema", schema)


def _check(schema: dict[str, Any], param: str, subject: str) -> None:
    try:
        canonical = json.dumps(schema, sort_keys=True)
        problem = _schema_problem(hashlib.sha256(canonical.encode()).digest(), canonical)
    except RecursionError:
        problem = "nested too deeply"
    if problem:
        raise RequestError(f"{param}: invalid JSON Schema for {subject}: {problem}", param=param)


def _schema_problem(digest: bytes, canonical: str) -> str | None:
    """Cached by the schema's digest, so the cache holds no client's full schema text."""
    cached = _PROBLEMS.get(digest, _UNSEEN)
    if cached is _UNSEEN:
        cached = _problem(json.loads(canonical))
        if len(_PROBLEMS) >= 4096:
            _PROBLEMS.pop(next(iter(_PROBLEMS)))
        _PROBLEMS[digest] = cached
    return cached


_PROBLEMS: dict[bytes, str | None] = {}
_UNSEEN = object()


def _problem(schema: Any) -> str | None:
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    error = exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(the schema itself)"
    return f"at '{where}': {error.message}"
