"""What every route needs: the server's configuration, the generation path and the response store."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from starlette.requests import HTTPConnection

from zllm_core.fence.guard import GuardConfig
from zllm_core.protocols.canonical import RequestError
from zllm_core.server.generation import Forget, Generate, Generation, Limits
from zllm_core.server.metrics import ServerMetrics
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.response_store import BUSY_SECONDS, ResponseStore
from zllm_core.server.tenant_limits import TenantQuota


@dataclass(frozen=True)
class ServerConfig:
    model_name: str
    max_output_tokens: int = 4096
    max_model_len: int | None = None  # None: the engine's
    api_keys: dict[str, str] = field(default_factory=dict)  # key -> tenant; empty: no auth
    max_body_bytes: int = 64 << 20
    store_path: str = ":memory:"
    loop_guard: bool = False  # break repetition loops (fence/guard.py), ending turns that keep looping
    request_timeout: float | None = None  # seconds from arrival to the last token
    tenant_quota: TenantQuota = TenantQuota()  # generations per API key at once, and waiting
    store_timeout: float = BUSY_SECONDS  # seconds a store write waits for another process's lock


@dataclass
class Runtime:
    """What every route needs, reached through `runtime(request)`."""

    config: ServerConfig
    generation: Generation
    store: ResponseStore
    created: int = field(default_factory=lambda: int(time.time()))

    def check_model(self, model: str) -> None:
        if model != self.config.model_name:
            raise RequestError(f"model '{model}' does not exist; this server serves "
                               f"'{self.config.model_name}'", param="model", status=404,
                               code="model_not_found")

    @classmethod
    def build(cls, config: ServerConfig, generate: Generate, end_ids: Callable[[], Sequence[int]],
              prompts: PromptBuilder, max_model_len: int, metrics: ServerMetrics,
              forget: Forget | None = None) -> "Runtime":
        """`generate` streams a request's output (AsyncEngine.generate's shape); `end_ids()` gives
        the ids that end a turn (the model's EOS ids, what fences allow once a structure is
        complete), asked on the first fenced request; `forget` (AsyncEngine.forget) releases a
        conversation's terminal states in the prefix cache when the conversation is evicted."""
        guard = GuardConfig() if config.loop_guard else None
        limits = Limits(max_model_len, config.max_output_tokens, guard, config.request_timeout,
                        config.tenant_quota)
        return cls(config, Generation(generate, end_ids, prompts, limits, metrics, forget),
                   ResponseStore(config.store_path, config.store_timeout))

    async def bind(self, conn: HTTPConnection) -> None:
        """A route dependency: this runtime for the request's routes, whichever app mounts them.
        A request the Gate did not see (an app of the caller's) belongs to the default tenant.
        A coroutine, so FastAPI runs it on the event loop rather than hopping to a thread."""
        conn.state.runtime = self
        if getattr(conn.state, "tenant", None) is None:
            conn.state.tenant = ""


def runtime(request: Any) -> Runtime:
    return request.state.runtime
