"""Per-tenant admission: how many generations one API key may run at once, and how many may wait.

A shared agent backend must not let one tenant's burst of fifty parallel sub-agents take every
slot of the engine. Each tenant gets `max_running` generations at once; up to `max_queued` more
wait, first come first served, with their prompts already built; past that a request is refused
with a 429 whose `retry-after` is the tenant's recent mean time a slot is held, so the SDKs'
own retry loops back off by about the time a slot takes to free.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass, field

from zllm_core.protocols.canonical import RequestError

_MEAN_WEIGHT = 0.2  # of the newest hold time in the tenant's running mean


@dataclass(frozen=True)
class TenantQuota:
    max_running: int | None = None  # per tenant; None: no limit
    max_queued: int = 0  # per tenant, beyond max_running

    def __post_init__(self) -> None:
        if self.max_running is not None and self.max_running < 1:
            raise ValueError("max_running must be at least 1")
        if self.max_queued < 0:
            raise ValueError("max_queued must not be negative")


@dataclass
class _Tenant:
    running: int = 0
    waiting: deque["Ticket"] = field(default_factory=deque)
    mean_hold: float = 1.0  # seconds; a first guess until a slot has been released


class Ticket:
    """One request's claim on its tenant's slots: `wait()` until it holds one, `release()` once
    (idempotent, and also right for a ticket still waiting: a client that left while queued)."""

    def __init__(self, limiter: "TenantLimiter", tenant: str, granted: bool):
        self._limiter, self.tenant = limiter, tenant
        self._state = "granted" if granted else "waiting"
        self._granted = asyncio.get_running_loop().create_future()
        self._since = time.monotonic()
        if granted:
            self._granted.set_result(None)

    async def wait(self) -> None:
        await asyncio.shield(self._granted)  # a cancelled waiter must not cancel the hand-off

    def release(self) -> None:
        state, self._state = self._state, "done"
        if state != "done":
            self._limiter._leave(self, held=state == "granted")

    def _grant(self) -> None:
        self._state = "granted"
        self._since = time.monotonic()
        self._granted.set_result(None)


class TenantLimiter:
    def __init__(self, quota: TenantQuota = TenantQuota()):
        self.quota = quota
        self._tenants: dict[str, _Tenant] = {}

    def enter(self, tenant: str) -> Ticket:
        """A ticket holding a slot now or queued for one; a 429 when the queue is full too."""
        limit = self.quota.max_running
        if limit is None:
            return Ticket(self, tenant, granted=True)
        t = self._tenants.setdefault(tenant, _Tenant())
        if t.running < limit:
            t.running += 1
            return Ticket(self, tenant, granted=True)
        if len(t.waiting) >= self.quota.max_queued:
            raise RequestError(
                f"too many concurrent requests for this API key: {t.running} running and "
                f"{len(t.waiting)} waiting, the most this server allows", status=429,
                code="rate_limit_exceeded", retry_after=max(1, math.ceil(t.mean_hold)))
        ticket = Ticket(self, tenant, granted=False)
        t.waiting.append(ticket)
        return ticket

    def _leave(self, ticket: Ticket, held: bool) -> None:
        t = self._tenants.get(ticket.tenant)
        if t is None:  # no limit configured: nothing was counted
            return
        if not held:
            t.waiting.remove(ticket)
        else:
            hold = time.monotonic() - ticket._since
            t.mean_hold += _MEAN_WEIGHT * (hold - t.mean_hold)
            if t.waiting:  # the slot passes straight to the oldest waiter
                t.waiting.popleft()._grant()
            else:
                t.running -= 1
        if not t.running and not t.waiting:
            del self._tenants[ticket.tenant]  # many one-off tenants must not grow the table

    def counts(self, tenant: str) -> tuple[int, int]:
        """(running, waiting) for a tenant, as the limiter counts them."""
        t = self._tenants.get(tenant)
        return (t.running, len(t.waiting)) if t else (0, 0)
