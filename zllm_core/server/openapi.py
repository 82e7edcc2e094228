"""The OpenAPI document at /openapi.json, true to what the server does.

The request bodies are FastAPI's schemas of the protocol models the routes validate with, so
the document and the validators cannot drift apart. What FastAPI would add on its own is
replaced by what the server really answers: not a 422 `HTTPValidationError` (the server never
sends one) but each operation's error statuses in its protocol's shape (OpenAI's
`{"error": {...}}`, Anthropic's `{"type": "error", ...}`), `retry-after` on a 429, the SSE
content type of streamed answers, the Prometheus text of /metrics, and the API-key schemes
the gate accepts. The Responses WebSocket (GET /v1/responses upgraded) is beyond OpenAPI.
"""
from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from zllm_core.server.errors import ANTHROPIC_TYPES, OPENAI_TYPES, is_anthropic
from zllm_core.server.gate import OPEN_PATHS

_GENERATION = (400, 401, 404, 413, 429, 500, 503, 504)
ERRORS: dict[tuple[str, str], tuple[int, ...]] = {
    ("post", "/v1/chat/completions"): _GENERATION,
    ("post", "/v1/responses"): _GENERATION,
    ("post", "/v1/messages"): _GENERATION,
    ("post", "/v1/messages/count_tokens"): (400, 401, 404, 413, 500),
    ("get", "/v1/responses/{response_id}"): (401, 404, 500),
    ("delete", "/v1/responses/{response_id}"): (401, 404, 500),
    ("get", "/v1/models"): (401, 500),
}
STREAMED = {"/v1/chat/completions", "/v1/responses", "/v1/messages"}
REASONS = {400: "The request is invalid; the error names the field", 401: "Missing or unknown API key",
           404: "No such model, or no such stored response", 413: "The body exceeds --max-body-bytes",
           429: "The API key's limit of running and queued requests is reached",
           500: "A failure of the server", 503: "The server is shutting down",
           504: "The request passed --request-timeout"}
_NULLABLE_TEXT = {"anyOf": [{"type": "string"}, {"type": "null"}]}
SCHEMAS = {
    "OpenAIError": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string", "minLength": 1},
                       "type": {"enum": sorted(set(OPENAI_TYPES.values()))},
                       "param": _NULLABLE_TEXT, "code": _NULLABLE_TEXT}}}},
    "AnthropicError": {"type": "object", "required": ["type", "error"], "properties": {
        "type": {"const": "error"},
        "error": {"type": "object", "required": ["type", "message"],
                  "properties": {"type": {"enum": sorted(set(ANTHROPIC_TYPES.values()))},
                                 "message": {"type": "string", "minLength": 1}}}}},
    "InputTokens": {"type": "object", "required": ["input_tokens"],
                    "properties": {"input_tokens": {"type": "integer", "minimum": 0}}},
    "ModelList": {"type": "object", "required": ["object", "data"], "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "items": {"type": "object", "required": ["id", "object", "max_model_len"],
                                            "properties": {"id": {"type": "string"}, "object": {"const": "model"},
                                                           "max_model_len": {"type": "integer"}}}}}},
}
# Before OpenAPI 3.2, a stream's `schema` describes each event (`data:` a JSON payload, or
# Chat's closing `[DONE]`).
SSE_EVENT = {"type": "object", "required": ["data"],
             "properties": {"event": {"type": "string"}, "data": {"type": "string", "minLength": 1}}}
OK_SCHEMAS = {("post", "/v1/messages/count_tokens"): "InputTokens", ("get", "/v1/models"): "ModelList"}
SECURITY_SCHEMES = {"bearer": {"type": "http", "scheme": "bearer"},
                    "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"}}


def install(app: FastAPI, model: str, secured: bool) -> None:
    """Serve the document below as the app's /openapi.json: ``model`` is the one name requests
    may ask for; ``secured``: API keys are required."""
    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = describe(get_openapi(title=app.title, version=app.version, routes=app.routes),
                                          model, secured)
        return app.openapi_schema
    app.openapi = document  # type: ignore[method-assign]


def methods_at(app: FastAPI, path: str) -> list[str]:
    """The methods the document lists for a concrete path (HEAD with GET, as Starlette serves)."""
    found: set[str] = set()
    for template, operations in app.openapi()["paths"].items():
        if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), path):
            found.update(m.upper() for m in operations)
    return sorted(found | ({"HEAD"} if "GET" in found else set()))


def describe(doc: dict[str, Any], model: str, secured: bool) -> dict[str, Any]:
    """FastAPI's document with the model it serves and the responses it really sends."""
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas.update(SCHEMAS)
    if secured:
        components["securitySchemes"] = SECURITY_SCHEMES
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            _describe_operation(path, method, op, secured)
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if "$ref" in body:  # any other name is a 404 model_not_found
                schemas[body["$ref"].rsplit("/", 1)[1]]["properties"]["model"]["enum"] = [model]
    return doc


def _describe_operation(path: str, method: str, op: dict[str, Any], secured: bool) -> None:
    responses = op["responses"]
    responses.pop("422", None)
    ok = responses["200"]
    if path == "/metrics":
        ok["content"] = {"text/plain": {"schema": {"type": "string"}}}
    if (method, path) in OK_SCHEMAS:
        ok["content"]["application/json"]["schema"] = {"$ref": f"#/components/schemas/{OK_SCHEMAS[method, path]}"}
    if path in STREAMED and method == "post":
        ok["description"] = "The answer; with `stream: true`, the protocol's events"
        ok["content"]["text/event-stream"] = {"schema": SSE_EVENT}
    if path in OPEN_PATHS:
        return
    if secured:
        op["security"] = [{"bearer": []}, {"x-api-key": []}]
    shape = {"$ref": "#/components/schemas/" + ("AnthropicError" if is_anthropic(path) else "OpenAIError")}
    for status in ERRORS.get((method, path), (401, 500)):
        if status == 401 and not secured:
            continue
        response: dict[str, Any] = {"description": REASONS[status],
                                    "content": {"application/json": {"schema": shape}}}
        if status == 429:
            response["headers"] = {"retry-after": {"description": "seconds to wait",
                                                   "schema": {"type": "integer", "minimum": 1}}}
        responses[str(status)] = response
