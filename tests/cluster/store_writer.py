"""One ingress's response store for the shared-store test: stores N responses under its own
prefix into a store other processes write too (a SQLite file or a PostgreSQL URL), then reads
every response of the others.

    python tests/cluster/store_writer.py LOCATION PREFIX N OTHER_PREFIX...
"""
import sys
import time

from zllm_core.protocols.canonical import Message
from zllm_core.server.response_store import ResponseStore, StoredResponse


def main(path: str, prefix: str, n: str, *others: str) -> None:
    store = ResponseStore(path)
    print("ready", flush=True)
    sys.stdin.readline()  # all start together
    for i in range(int(n)):
        rid = f"resp_{prefix}_{i}"
        store.put("tenant", StoredResponse(rid, {"id": rid, "object": "response"},
                                           [Message("user", f"{prefix} asks {i}"), Message("assistant", f"answer {i}")],
                                           cache_key=f"{prefix}-conv"))
    deadline = time.monotonic() + 30
    missing = [f"resp_{o}_{i}" for o in others for i in range(int(n))]
    while missing and time.monotonic() < deadline:
        missing = [rid for rid in missing if store.get("tenant", rid) is None]
    print("missing", len(missing), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
