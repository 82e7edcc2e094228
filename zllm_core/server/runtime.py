"""What every route needs: the server's configuration, the generation path and the response store."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from zllm_core.protocols.canonical import RequestError
from zllm_core.server.generation import Generation
from zllm_core.server.response_store import ResponseStore


@dataclass(frozen=True)
class ServerConfig:
    model_name: str
    max_output_tokens: int = 4096
    max_model_len: int | None = None  # None: the engine's
    api_keys: dict[str, str] = field(default_factory=dict)  # key -> tenant; empty: no auth
    max_body_bytes: int = 64 << 20
    store_path: str = ":memory:"
    loop_guard: bool = False  # break repetition loops (fence/guard.py), ending turns that keep looping


@dataclass
class Runtime:
    """What every route needs, reached through `request.app.state.runtime`."""

    config: ServerConfig
    generation: Generation
    store: ResponseStore
    created: int = field(default_factory=lambda: int(time.time()))

    def check_model(self, model: str) -> None:
        if model != self.config.model_name:
            raise RequestError(f"model '{model}' does not exist; this server serves "
                               f"'{self.config.model_name}'", param="model", status=404,
                               code="model_not_found")


def runtime(request: Any) -> Runtime:
    return request.app.state.runtime
