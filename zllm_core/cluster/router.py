"""The affinity policy as Ray Serve's request router for the engine replicas.

It runs in the ingress process, inside the handle that calls the replicas: it reads each
request's `Route` from its EngineCall and each replica's published summary from its routing
stats, counts the requests it has in flight per replica (the load), and returns every replica
in order of preference; Ray Serve takes the first that has room. A conversation is pinned to
the replica that finished its last turn.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from zllm_core.cluster import routers
from zllm_core.cluster.policy import AffinityPolicy, Balance, ReplicaView, Route


def _route(pending: Optional[PendingRequest]) -> Optional[Route]:
    call = pending.args[0] if pending is not None and pending.args else None
    return getattr(call, "route", None)


class AffinityRouter(RequestRouter):
    def initialize_state(self, balance_absolute: int = 8, balance_relative: float = 1.5, **_: Any) -> None:
        self.policy = AffinityPolicy(Balance(balance_absolute, balance_relative))
        self.in_flight: Counter[ReplicaID] = Counter()
        self._routes: dict[str, Route] = {}  # by Ray's internal request id, until it completes
        routers.register(self._deployment_id.name, self)

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> list[list[RunningReplica]]:
        route = _route(pending_request)
        if route is None or not candidate_replicas:  # not a generate call (describe, metrics)
            return [candidate_replicas]
        by_id = {r.replica_id: r for r in candidate_replicas}
        views = {r.replica_id: ReplicaView(self._load(r), r.routing_stats.get("summary"))
                 for r in candidate_replicas}
        order = self.policy.choose(route, views)
        self.policy.routed(route, order[0])  # a parallel call of the conversation follows it
        self._routes[pending_request.metadata.internal_request_id] = route
        return [[by_id[r]] for r in order]

    def _load(self, replica: RunningReplica) -> int:
        """Ours in flight, or Ray's count for the replica (other ingresses' included) if higher."""
        return max(self.in_flight[replica.replica_id], self.replica_queue_len_cache.get(replica.replica_id) or 0)

    def on_send_request(self, replica_id: ReplicaID) -> None:
        super().on_send_request(replica_id)
        self.in_flight[replica_id] += 1

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self.in_flight[replica_id] = max(0, self.in_flight[replica_id] - 1)
        route = self._routes.pop(internal_request_id, None)
        if route is not None:
            self.policy.routed(route, replica_id)  # its next turn finds its state there

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.in_flight.pop(replica_id, None)

    def reports(self) -> dict[str, dict[str, Any]]:
        """Each replica's last routing stats and our load on it, by replica id."""
        return {r.replica_id.unique_id: {**r.routing_stats, "in_flight": self.in_flight[r.replica_id]}
                for r in self.curr_replicas.values()}
