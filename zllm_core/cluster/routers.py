"""The request routers of this process, by deployment: the ingress reads their replicas'
published stats for /cluster and its metrics. A module of its own because Ray Serve ships a
router's module by value (a dict there would be a copy); this one is imported by reference."""
from __future__ import annotations

from typing import Any, Optional

_ROUTERS: dict[str, Any] = {}


def register(deployment: str, router: Any) -> None:
    _ROUTERS[deployment] = router


def router_for(deployment: str) -> Optional[Any]:
    """The AffinityRouter of `deployment`, once a handle in this process has made it."""
    return _ROUTERS.get(deployment)
