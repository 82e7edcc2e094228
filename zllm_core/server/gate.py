"""The door every request passes: API key -> tenant, and the request body size limit.

A pure ASGI middleware, so it covers WebSocket upgrades as well as HTTP, and rejects an
oversized body while it streams in rather than after buffering it.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Awaitable, Callable

from starlette.exceptions import HTTPException

from zllm_core.protocols import message_memo
from zllm_core.server.errors import error_body

OPEN_PATHS = ("/health", "/metrics", "/metrics.json", "/openapi.json")  # no tenant's data


def tenant_for(key: str) -> str:
    """A stable tenant name for a key given without one (stored responses survive restarts)."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def parse_api_keys(specs: list[str]) -> dict[str, str]:
    """`KEY` or `KEY:TENANT` -> {key: tenant}."""
    keys = {}
    for spec in specs:
        key, _, tenant = spec.partition(":")
        keys[key] = tenant or tenant_for(key)
    return keys


class BodyTooLarge(HTTPException):
    """An HTTPException because FastAPI re-raises those from body parsing (it turns any other
    exception there into a generic 400); the error handlers give it the protocol's 413 shape."""

    def __init__(self, limit: int):
        super().__init__(413, f"request body exceeds the limit of {limit} bytes")


def _read_body_as_json(scope: dict) -> None:
    """Every body this API takes is JSON, whatever its content-type says: curl's `-d` sends
    `application/x-www-form-urlencoded`, some clients `text/plain`. The reference servers
    read those bodies as JSON, so the parser is told the same."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
    scope["headers"] = headers + [(b"content-type", b"application/json")]


class Gate:
    def __init__(self, app: Any, api_keys: dict[str, str], max_body_bytes: int):
        self.app, self.api_keys, self.max_body_bytes = app, api_keys, max_body_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        tenant = self._tenant(headers)
        if tenant is None and scope["path"] not in OPEN_PATHS:
            return await self._reject(scope, send, 401, "missing or invalid API key")
        scope.setdefault("state", {})["tenant"] = tenant or ""
        message_memo.scope.set(tenant or "")  # resent histories are remembered per tenant
        if scope["type"] == "http":
            _read_body_as_json(scope)
            if int(headers.get("content-length") or 0) > self.max_body_bytes:
                return await self._reject(scope, send, 413, BodyTooLarge(self.max_body_bytes).detail)
            receive = self._limited(receive)
        await self.app(scope, receive, send)

    def _tenant(self, headers: dict[str, str]) -> str | None:
        if not self.api_keys:
            return ""
        auth = headers.get("authorization", "")
        key = auth[7:] if auth.lower().startswith("bearer ") else headers.get("x-api-key", "")
        return self.api_keys.get(key.strip())

    def _limited(self, receive: Callable[[], Awaitable[dict]]) -> Callable[[], Awaitable[dict]]:
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body_bytes:
                raise BodyTooLarge(self.max_body_bytes)
            return message
        return limited

    async def _reject(self, scope: dict, send: Callable, status: int, message: str) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": message})
            return
        body = json.dumps(error_body(scope["path"], status, message)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
