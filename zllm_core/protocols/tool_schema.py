"""Function tools as every protocol declares them: a name and a JSON Schema that must be valid.

A schema is checked against its JSON Schema meta-schema (the draft its `$schema` names, else
2020-12) before the request reaches the template: a typo such as `"type": "objekt"` is the
client's error, named with the tool and the keyword, never a prompt built from nonsense.
Agents resend the same tools on every call, so each distinct schema is checked once.
"""
from __future__ import annotations

import functools
import json
from typing import Any

from jsonschema import exceptions, validators

from zllm_core.protocols.canonical import FunctionTool, RequestError


def function_tool(name: str, description: str | None, schema: dict[str, Any] | None,
                  param: str) -> FunctionTool:
    """`param` is where the schema sits in the protocol's body (`tools[2].input_schema`)."""
    schema = schema or {}
    problem = _schema_problem(json.dumps(schema, sort_keys=True))
    if problem:
        raise RequestError(f"{param}: invalid JSON Schema for tool '{name}': {problem}", param=param)
    return FunctionTool(name=name, description=description, parameters=schema)


@functools.lru_cache(maxsize=4096)
def _schema_problem(canonical: str) -> str | None:
    schema = json.loads(canonical)
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    error = exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(the schema itself)"
    return f"at '{where}': {error.message}"
