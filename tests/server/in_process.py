"""An ASGI app served by uvicorn on a loopback port, in a thread of the test process."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Iterator

import uvicorn


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """The app's base URL while the block runs; the server stops after it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
