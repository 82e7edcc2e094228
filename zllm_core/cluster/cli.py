"""`zllm serve --replicas N`: the flags the cluster adds to `zllm serve` (no Ray import here)."""
from __future__ import annotations

import argparse

from zllm_core.cluster.policy import ROUTE_WINDOW_BLOCKS


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster (Ray Serve; pip install 'zllm_core[cluster]')")
    g.add_argument("--replicas", type=int, default=0, metavar="N",
                   help="serve N engine replicas (one per GPU; N CPU replicas on a CPU host) behind one "
                        "ingress, routed by conversation and resident prefix (default 0: one engine, no Ray)")
    g.add_argument("--ray-address", default=None,
                   help="join this Ray cluster (default: start a local one for this process)")
    g.add_argument("--route-balance-abs", type=int, default=8, metavar="N",
                   help="locality yields to balance once a replica carries N more requests than the "
                        "least loaded one ...")
    g.add_argument("--route-balance-rel", type=float, default=1.5, metavar="X",
                   help="... and X times as many (default 8 and 1.5)")
    g.add_argument("--route-window-tokens", type=int, default=ROUTE_WINDOW_BLOCKS * 16, metavar="N",
                   help="prompt tokens whose block keys the router matches against replicas' summaries")
    g.add_argument("--routing-period", type=float, default=1.0, metavar="SECONDS",
                   help="how often replicas publish their resident-block summaries (default 1)")
