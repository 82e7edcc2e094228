"""One HTTP request straight into an ASGI app, no socket: what a benchmark needs to time the
server's own work from the request body on."""
from __future__ import annotations

import asyncio
from typing import Any


async def post_json(app: Any, path: str, body: bytes) -> tuple[int, bytes]:
    """POSTs `body` to `path`; the response's status and body."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 9), "server": ("127.0.0.1", 80),
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    done = asyncio.Event()
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    status, chunks = 0, []

    async def receive() -> dict:
        if pending:
            return pending.pop()
        await done.wait()  # a disconnect only once the response is out
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                done.set()

    await app(scope, receive, send)
    return status, b"".join(chunks)
