"""Errors in each protocol's own shape, with the offending field named, and never a traceback.

OpenAI clients read `{"error": {message, type, param, code}}`; Anthropic clients read
`{"type": "error", "error": {type, message}}`. The path decides which one a client gets.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from zllm_core.protocols.canonical import RequestError

log = logging.getLogger("zllm.server")

OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
                404: "invalid_request_error", 413: "invalid_request_error",
                422: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
                503: "server_error", 504: "timeout_error"}
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                   404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
                   422: "invalid_request_error", 429: "rate_limit_error", 500: "api_error",
                   503: "api_error", 504: "timeout_error"}


def is_anthropic(path: str) -> bool:
    return path.startswith("/v1/messages")


def error_body(path: str, status: int, message: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    if is_anthropic(path):
        # Anthropic's shape has no `param`: its messages lead with the field, as its API's do.
        if param and param not in message:
            message = f"{param}: {message}"
        return {"type": "error",
                "error": {"type": ANTHROPIC_TYPES.get(status, "invalid_request_error"),
                          "message": message}}
    return {"error": {"message": message, "type": OPENAI_TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(path: str, err: RequestError) -> JSONResponse:
    # Both SDKs' retry loops wait the `retry-after` seconds a 429 names.
    headers = {"retry-after": str(err.retry_after)} if err.retry_after is not None else None
    return JSONResponse(error_body(path, err.status, err.message, err.param, err.code),
                        status_code=err.status, headers=headers)


def field_path(loc: tuple[Any, ...]) -> str:
    """('body', 'messages', 0, 'content') -> 'messages[0].content'."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not (isinstance(part, str) and (part.startswith(("function-", "tagged-")) or
                                             part in ("str", "list", "none", "dict"))):
            out += f".{part}" if out else str(part)
    return out


def validation_error(exc: RequestValidationError) -> RequestError:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return RequestError("malformed JSON in request body", code="invalid_json")
    if not errors:
        return RequestError("invalid request body")
    first = errors[0]
    param = field_path(tuple(first.get("loc", ())))
    if not param:
        return RequestError("the request body must be a JSON object", code="invalid_json")
    if first.get("type") == "missing":
        return RequestError(f"missing required field '{param}'", param=param)
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return RequestError(f"invalid field '{param}': {first.get('msg')}{more}", param=param)


ROUTE_ERRORS = (RequestError, RequestValidationError, HTTPException)


def route_error(path: str, exc: RequestError | RequestValidationError | HTTPException) -> JSONResponse:
    """The protocol's error response for one of ROUTE_ERRORS: the routes answer their own, so
    an app of the caller's that mounts them gives SDKs the shapes they parse."""
    if isinstance(exc, RequestValidationError):
        return error_response(path, validation_error(exc))
    if isinstance(exc, HTTPException):  # its headers stay: a 405 lists the methods in `Allow`
        response = error_response(path, RequestError(str(exc.detail), status=exc.status_code))
        response.headers.update(exc.headers or {})
        return response
    return error_response(path, exc)


def install(app: FastAPI, methods_at: Callable[[str], list[str]] | None = None) -> None:
    """The app's own errors (no such path, a method it lacks, a bug outside a route).
    `methods_at(path)` lists the methods a path takes, for a 405's `Allow`: Starlette's names
    only one route's, and a path may have several."""
    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        allowed = methods_at(request.url.path) if exc.status_code == 405 and methods_at else None
        if allowed:  # else Starlette's own (a path the document does not list)
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
        return route_error(request.url.path, exc)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return error_response(request.url.path, RequestError("internal server error", status=500))
