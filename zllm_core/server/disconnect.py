"""Work for a client that may leave before its response starts.

A streaming response notices a vanished client as soon as it writes (Starlette listens for the
disconnect while it streams); before that, a non-streaming generation, or a stream still
waiting for its tenant's slot or its first token, would keep running for nobody. `for_client`
cancels the work when the client's connection closes, which closes the engine stream (aborting
the request, freeing its blocks) and gives back its place in the tenant's queue.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Awaitable, TypeVar

from starlette.requests import Request

from zllm_core.protocols.canonical import RequestError

T = TypeVar("T")
CLIENT_CLOSED = 499  # nginx's status for a request its client abandoned: the access line says so


async def for_client(request: Request, work: Awaitable[T]) -> T:
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():  # the client left (or this handler was cancelled)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise RequestError("the client closed the connection", status=CLIENT_CLOSED,
                           code="client_closed_request")
    return task.result()


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone; the body has been read, so nothing else arrives."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
