"""`zllm serve`: load a model and serve the three protocols over HTTP and WebSocket."""
from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any, Iterator

from zllm_core.model.model_names import DEFAULT_MODEL


def default_store_path() -> str:
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return str(state / "zllm" / "responses.sqlite3")


LOG_LEVELS = ("debug", "info", "warning", "error")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_size(text: str) -> int:
    """``1073741824``, ``512M``, ``64G`` (binary units; a trailing B or iB is allowed)."""
    body = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = body[-1:] if body[-1:] in _UNITS else ""
    try:
        value = int(float(body[:len(body) - len(unit)]) * _UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte size (e.g. 4G, 512M, 1048576)") from None
    return _positive(value, text)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    return _positive(value, text)


def _positive(value: int, text: str) -> int:
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def tool_dialect(text: str) -> str:
    from zllm_core.dialects.selection import dialect_named

    try:
        return dialect_named(text).name
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve OpenAI Chat/Responses and Anthropic Messages APIs")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="smollm2 (default), zllm-demo, a .gguf file, or a HF or GGUF model directory")
    p.add_argument("--served-model-name", default=None,
                   help="the name clients pass as `model` (default: the model's name)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--api-key", action="append", default=[], metavar="KEY[:TENANT]",
                   help="accept this key (repeatable); each key maps to a tenant")
    p.add_argument("--tool-dialect", type=tool_dialect, default=None,
                   help="hermes, glm45, glm47 or dsml; default: the model's chat template (or config) tells")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--allow-long-context", action="store_true",
                   help="accept a --max-model-len beyond the model's trained context")
    p.add_argument("--max-output-tokens", type=int, default=4096,
                   help="cap on any request's output tokens")
    p.add_argument("--max-body-bytes", type=int, default=64 << 20)
    p.add_argument("--max-running-per-key", type=int, default=None, metavar="N",
                   help="generations one API key (tenant) may run at once (default: no limit)")
    p.add_argument("--max-queued-per-key", type=int, default=0, metavar="N",
                   help="requests of one key that wait for a slot beyond that; past it a 429 "
                        "with retry-after (default 0)")
    p.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                   help="end requests still running this long after arrival: a 504, or the "
                        "protocol's error event once streaming (default: none)")
    p.add_argument("--response-store", default=default_store_path(),
                   help="stored responses (previous_response_id): a SQLite file, or a postgresql:// URL that "
                        "ingresses on several hosts share")
    p.add_argument("--response-store-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="how long storing a response waits while another process holds what it "
                        "writes (the file's write lock, a PostgreSQL row); past it the response "
                        "fails as not stored (503)")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:N")
    p.add_argument("--loop-guard", action="store_true",
                   help="break token loops in generations (and end turns that keep looping)")
    p.add_argument("--kv-cache-bytes", type=byte_size, default=None,
                   help="device KV cache budget, e.g. 8G (default: the engine's, 1G)")
    p.add_argument("--conversation-bytes", type=byte_size, default=1 << 30,
                   help="host memory for what is kept per conversation (validated history, rendered "
                        "text, tokenizer session and the exact ids it generated, recent responses, the "
                        "cache's record of its last turns); past it the least recently used "
                        "conversation is released whole (default 1G)")
    p.add_argument("--max-num-seqs", type=positive_int, default=None,
                   help="most requests running at once (default: the engine's, 64)")
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=None,
                   help="tokens per engine step, decodes first, prefill chunks in the rest "
                        "(default: the engine's, 2048; smaller keeps decoding streams smoother "
                        "while a long prompt prefills)")
    p.add_argument("--max-prefill-tokens-while-decoding", type=positive_int, default=None, metavar="N",
                   help="prefill tokens a step carries beside decoding streams (default: what the "
                        "budget leaves); small keeps streams' inter-token latency near idle while a "
                        "long prompt prefills, at the cost of that prompt's time to first token")
    p.add_argument("--speculative-tokens", type=int, default=0,
                   help="prompt-lookup draft tokens verified per decode step (0: off); requests "
                        "asking for logprobs are never drafted")
    p.add_argument("--ssd-cache-dir", default=None,
                   help="directory of the prefix cache's SSD tier (off when not given)")
    p.add_argument("--ssd-cache-bytes", type=byte_size, default=64 << 30,
                   help="SSD tier budget, least recently used snapshots evicted past it (default 64G)")
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS,
                   help="info logs one access line per request")
    from zllm_core.cluster.cli import add_cluster_arguments
    add_cluster_arguments(p)  # --replicas N: engines on Ray Serve (zllm_core/cluster)
    p.set_defaults(func=run_serve)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, taken before the model loads: a busy port fails in a second, not
    after a minute of loading."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
        raise ValueError(f"port {port} on {host} {reason}; pick another with --port "
                         "(make serve PORT=...), or 0 for any free port") from None
    return sock


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The EngineConfig fields the flags set (the device aside)."""
    options: dict[str, Any] = {"allow_long_context": args.allow_long_context}
    if args.max_model_len:
        options["max_model_len"] = args.max_model_len
    for name in ("kv_cache_bytes", "max_num_seqs", "max_num_batched_tokens", "speculative_tokens",
                 "max_prefill_tokens_while_decoding"):
        if getattr(args, name):
            options[name] = getattr(args, name)
    if args.ssd_cache_dir:
        options.update(ssd_cache_dir=args.ssd_cache_dir, ssd_cache_bytes=args.ssd_cache_bytes)
    return options


def server_config(args: argparse.Namespace):
    from zllm_core.server.gate import parse_api_keys
    from zllm_core.server.runtime import ServerConfig
    from zllm_core.server.tenant_limits import TenantQuota

    return ServerConfig(
        model_name=args.served_model_name or Path(str(args.model)).name,
        max_output_tokens=args.max_output_tokens, max_model_len=args.max_model_len,
        api_keys=parse_api_keys(args.api_key), max_body_bytes=args.max_body_bytes,
        store_path=args.response_store, store_timeout=args.response_store_timeout,
        loop_guard=args.loop_guard,
        request_timeout=args.request_timeout,
        tenant_quota=TenantQuota(args.max_running_per_key, args.max_queued_per_key))


def run_serve(args: argparse.Namespace) -> int:
    if args.replicas:
        from zllm_core.cluster.deploy import run_cluster
        return run_cluster(args)
    import uvicorn

    class _Server(uvicorn.Server):
        """On SIGTERM (or Ctrl-C) uvicorn stops listening, then waits for open responses to
        end; stopping the engine first ends every in-flight generation now, each stream with
        its protocol's error event (503 `shutting_down`). The engine's shutdown then backs its
        prefix state up to the SSD tier, inside the signal capture: once serving ends, uvicorn
        re-raises the signal it caught, and with the default handler back that kills the
        process on the spot."""

        def __init__(self, config: uvicorn.Config, engine: Any):
            super().__init__(config)
            self.engine = engine

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.engine.stop()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                try:
                    yield
                finally:
                    self.engine.shutdown()

    from zllm_core.engine.async_engine import AsyncEngine
    from zllm_core.engine.device import describe_device, resolve_device
    from zllm_core.model.model_names import resolve_model
    from zllm_core.server.app import create_app
    from zllm_core.server.prompt import PromptBuilder

    device = resolve_device(args.device)
    config = server_config(args)  # a bad quota is refused before the load
    sock = bind(args.host, args.port)
    configure_logging(args.log_level)
    model_dir = resolve_model(args.model)  # once: for zllm-demo it checks 160 MB of hashes
    engine = AsyncEngine.from_model(str(model_dir), device=device, **engine_options(args))
    prompts = PromptBuilder.from_model_dir(model_dir, engine.tokenizer, args.tool_dialect, args.conversation_bytes)
    app = create_app(engine, prompts, config)
    host, port = sock.getsockname()[:2]
    # Tests and scripts read this line to find a --port 0 server.
    print(f"zllm serving '{config.model_name}' on http://{host}:{port} "
          f"(device {describe_device(device)})", file=sys.stderr, flush=True)
    # log_config=None: uvicorn logs through the handler configured above; access lines are ours.
    server = _Server(uvicorn.Config(app, log_level=args.log_level, log_config=None,
                                    access_log=False, ws="websockets-sansio"), engine)
    server.run(sockets=[sock])  # shuts the engine down however serving ends
    return 0
