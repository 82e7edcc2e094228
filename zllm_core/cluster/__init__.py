"""Scale-out: zllm engines as Ray Serve replicas behind one ingress that speaks the protocols.

`summary` (what a replica publishes about its resident blocks), `policy` (where a request
goes: its conversation's replica, else the longest resident prefix, load breaking ties and
overriding locality past a threshold), `router` (that policy as Ray Serve's request router),
`replica` (an engine as a deployment), `ingress` (the protocol app over the replicas),
`deploy` (the application and `zllm serve --replicas N`). Only `router`, `replica`, `ingress`
and `deploy` import Ray.
"""
