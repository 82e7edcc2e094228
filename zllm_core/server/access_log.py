"""One access line per HTTP request: method, path, status, tokens in/out/cached, time to first
token, draft tokens accepted/verified when speculating, and duration, at info level
(`--log-level` changes it).

The generation fills the request's `Access` record through a context variable, so the line is
written where the response ends (streams included) without any route passing it along.
"""
from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable

from zllm_core.server.metrics import ServerMetrics

log = logging.getLogger("zllm.access")


@dataclass
class Access:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    ttft: float | None = None  # seconds from admission to the first output token
    drafted: int = 0  # speculation: draft tokens verified, and accepted
    accepted: int = 0

    def line(self, method: str, path: str, status: int, seconds: float) -> str:
        tokens = "" if self.prompt_tokens is None else (
            f" in={self.prompt_tokens} out={self.completion_tokens} cached={self.cached_tokens}")
        ttft = "" if self.ttft is None else f" ttft={self.ttft * 1e3:.1f}ms"
        spec = f" drafts={self.accepted}/{self.drafted}" if self.drafted else ""
        return f"{method} {path} {status}{tokens}{ttft}{spec} {seconds * 1e3:.1f}ms"


current: ContextVar[Access | None] = ContextVar("zllm_access", default=None)


class AccessLog:
    """Outermost ASGI middleware, so refusals at the gate (401, 413) are logged too."""

    def __init__(self, app: Any, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        access, status, start = Access(), 500, time.perf_counter()
        token = current.set(access)

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, sending)
        finally:
            current.reset(token)
            seconds = time.perf_counter() - start
            route = scope.get("route")  # the matched route's template keeps label values bounded
            self.metrics.duration.labels(getattr(route, "path", "unmatched")).observe(seconds)
            log.info("%s", access.line(scope["method"], scope["path"], status, seconds))
