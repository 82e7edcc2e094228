"""Server-sent events: framing, and starting a stream only once its first event exists."""
from __future__ import annotations

import contextlib
import json
from typing import Any, AsyncIterator

from fastapi.responses import StreamingResponse


def data_frame(payload: Any) -> str:
    """A frame without an event name (Chat Completions)."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def event_frame(payload: dict[str, Any]) -> str:
    """A frame named by its payload's type (Responses, Anthropic Messages)."""
    return f"event: {payload['type']}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def primed(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Pull the first item now, so a request the engine refuses still gets a plain HTTP error."""
    try:
        first = await stream.__anext__()
    except BaseException:
        await stream.aclose()
        raise
    return _chain(first, stream)


async def _chain(first: Any, stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async with contextlib.aclosing(stream):
        yield first
        async for item in stream:
            yield item


def sse_response(frames: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(frames, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
