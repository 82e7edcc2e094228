"""GET /v1/responses upgraded to a WebSocket: serial response.create messages on one connection.

Each response streams the same events as SSE, one JSON frame each. A response.create that
arrives while one is running gets response_already_in_flight; responses made with store: false
can still be continued on the same connection, which keeps its own recent turns.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from zllm_core.protocols.canonical import RequestError
from zllm_core.server.body import loads
from zllm_core.protocols.openai_responses import ResponsesRequest
from zllm_core.server.errors import validation_error
from zllm_core.server.response_store import StoredResponse
from zllm_core.server.responses import ResponseTurn
from zllm_core.server.runtime import runtime

router = APIRouter()
log = logging.getLogger("zllm.server")


def _error(exc: Exception) -> dict[str, Any]:
    """The error frame for a failed response.create: the client's (4xx) or ours (500, logged)."""
    if not isinstance(exc, RequestError):
        log.exception("Responses WebSocket request failed", exc_info=exc)
        exc = RequestError("internal server error", status=500, code="internal_error")
    kind = "server_error" if exc.status >= 500 else "invalid_request_error"
    return {"type": "error", "status": exc.status,
            "error": {"type": kind, "code": exc.code, "message": exc.message, "param": exc.param}}


def _request(text: str) -> ResponsesRequest:
    try:
        message = loads(text)  # orjson, as request bodies: a call resends the whole context
    except json.JSONDecodeError:
        raise RequestError("malformed JSON in WebSocket message", code="invalid_json") from None
    if not isinstance(message, dict) or message.get("type") != "response.create":
        raise RequestError("expected a message of type 'response.create'", param="type")
    fields = {k: v for k, v in message.items() if k != "type"}
    try:
        return ResponsesRequest.model_validate(fields)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise validation_error(RequestValidationError(errors)) from None


async def _run(ws: WebSocket, turn: ResponseTurn) -> None:
    try:
        async for payload in turn.events():
            await ws.send_text(json.dumps(payload, ensure_ascii=False))
    except WebSocketDisconnect:
        pass  # the client left; the loop below sees the disconnect and cleans up
    except Exception as exc:  # any failure must answer, or the client waits forever
        await ws.send_text(json.dumps(_error(exc)))


@router.websocket("/v1/responses")
async def responses_socket(ws: WebSocket) -> None:
    await ws.accept()
    rt, tenant = runtime(ws), ws.scope["state"]["tenant"]
    recent: dict[str, StoredResponse] = {}
    running: asyncio.Task | None = None
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            text = message.get("text") or (message.get("bytes") or b"").decode("utf-8", "replace")
            try:
                if running is not None and not running.done():
                    raise RequestError("a response is already in flight on this connection",
                                       status=409, code="response_already_in_flight")
                turn = ResponseTurn(rt, _request(text), tenant, recent)
            except Exception as exc:  # a bad request or our bug: either way the socket stays open
                await ws.send_text(json.dumps(_error(exc)))
                continue
            running = asyncio.create_task(_run(ws, turn))
    except WebSocketDisconnect:
        pass
    finally:
        if running is not None:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await running
