"""Request bodies parsed with orjson: an agent resends its whole context (megabytes of JSON)
on every call, and the standard library's parser is several times slower on it.

Routes built with `FastBodyRoute` parse with orjson; a body orjson refuses goes to the
standard parser, which either takes it (what JSON allows beyond orjson: a lone surrogate
escape, NaN, a 100-digit integer, UTF-16) or raises the JSONDecodeError FastAPI turns into the
protocol's 400 (bytes in no Unicode encoding included, which the standard parser would refuse
with a UnicodeDecodeError instead). So a client sees what it saw before, only sooner; the one difference is
an integer past 64 bits, which orjson reads as a float (no field here takes such a value).
A large body that resends a recent one's conversation is parsed from where it stops
resending (resent_body.py).
"""
from __future__ import annotations

import json
from typing import Any, Callable, Coroutine

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute

from zllm_core.server.errors import ROUTE_ERRORS, route_error
from zllm_core.server.resent_body import ResentBodies

RESENT = ResentBodies()


def loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body)
    except UnicodeDecodeError as exc:  # bytes in no UTF: as malformed as bad JSON, and said alike
        raise json.JSONDecodeError(f"the body is not UTF-8, -16 or -32 text ({exc.reason})", "", 0) from None


class FastBodyRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            route = (self.scope.get("state", {}).get("tenant", ""), self.scope["path"])
            self._json = RESENT.loads(await self.body(), route, loads)
        return self._json


class FastBodyRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(FastBodyRequest(request.scope, request.receive))
            except ROUTE_ERRORS as exc:
                return route_error(request.url.path, exc)
        return route
