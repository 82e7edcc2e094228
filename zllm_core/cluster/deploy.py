"""The Ray Serve application: N engine replicas (one per GPU, or a share of the CPUs each)
behind one ingress, and `zllm serve --replicas N`, which starts (or joins) a Ray cluster, runs
the application on Ray Serve's HTTP proxy and stops it all on SIGTERM or Ctrl-C.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.serve.config import RequestRouterConfig

from zllm_core.cluster.ingress import ENGINE_DEPLOYMENT, Ingress
from zllm_core.cluster.replica import EngineReplica

APP_NAME = "zllm"
LOCAL_OBJECT_STORE_BYTES = 128 << 20  # replicas pass token ids and events, never tensors


def wants_gpus(device: str) -> bool:
    """One GPU per replica for cuda devices, and for auto where the cluster has GPUs."""
    return device.startswith("cuda") or (device == "auto" and ray.cluster_resources().get("GPU", 0) >= 1)


def build_app(args: argparse.Namespace) -> Any:
    from zllm_core.model.model_names import resolve_model
    from zllm_core.server.cli import engine_options

    model_dir = str(resolve_model(args.model))
    options = engine_options(args)
    if wants_gpus(args.device):
        # Ray gives each replica its own GPU (CUDA_VISIBLE_DEVICES): it is that replica's cuda:0.
        actor, threads, options["device"] = {"num_gpus": 1}, 0, "cuda"
    else:
        # Replicas share the host's cores; each takes its share, and none is reserved in Ray.
        actor, threads, options["device"] = {"num_cpus": 0}, max(1, (os.cpu_count() or 1) // args.replicas), "cpu"
    engines = serve.deployment(EngineReplica).options(
        name=ENGINE_DEPLOYMENT, num_replicas=args.replicas, ray_actor_options=actor,
        # Past the engine's batch a request waits in its scheduler; beyond twice that, Ray holds it.
        max_ongoing_requests=2 * (args.max_num_seqs or 64),
        request_router_config=RequestRouterConfig(
            request_router_class="zllm_core.cluster.router:AffinityRouter",  # imported there, not pickled
            request_router_kwargs={"balance_absolute": args.route_balance_abs,
                                   "balance_relative": args.route_balance_rel},
            request_routing_stats_period_s=args.routing_period,
            request_routing_stats_timeout_s=max(10 * args.routing_period, 5.0)),
        graceful_shutdown_timeout_s=10)  # the engine ends its streams at once when it stops
    ingress = serve.deployment(serve.ingress()(Ingress)).options(
        name="ingress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=4096,
        graceful_shutdown_timeout_s=10)
    return ingress.bind(engines.bind(model_dir, options, threads), args)


def run_cluster(args: argparse.Namespace) -> int:
    from zllm_core.server.cli import bind, configure_logging, server_config

    server_config(args)  # bad flags fail here, before Ray starts
    if args.replicas < 1:
        raise ValueError(f"--replicas must be at least 1, got {args.replicas}")
    sock = bind(args.host, args.port)  # a busy port fails now; port 0 takes a free one for Ray's proxy
    host, port = sock.getsockname()[:2]
    sock.close()
    configure_logging(args.log_level)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    local = args.ray_address is None
    ray.init(address=args.ray_address, include_dashboard=False,
             object_store_memory=LOCAL_OBJECT_STORE_BYTES if local else None)
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(build_app(args), name=APP_NAME, route_prefix="/")
        name = args.served_model_name or Path(str(args.model)).name
        # Tests and scripts read this line to find a --port 0 server.
        print(f"zllm serving '{name}' on http://{host}:{port} ({args.replicas} replicas on Ray Serve)",
              file=sys.stderr, flush=True)
        _wait_for_signal()
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
