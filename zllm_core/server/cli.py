"""`zllm serve`: load a model and serve the three protocols over HTTP and WebSocket."""
from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from zllm_core.model.model_names import DEFAULT_MODEL


def default_store_path() -> str:
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return str(state / "zllm" / "responses.sqlite3")


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
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--allow-long-context", action="store_true",
                   help="accept a --max-model-len beyond the model's trained context")
    p.add_argument("--max-output-tokens", type=int, default=4096,
                   help="cap on any request's output tokens")
    p.add_argument("--max-body-bytes", type=int, default=64 << 20)
    p.add_argument("--response-store", default=default_store_path(),
                   help="SQLite file for stored responses (previous_response_id)")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from zllm_core.engine.async_engine import AsyncEngine
    from zllm_core.model.model_names import resolve_model
    from zllm_core.server.app import create_app
    from zllm_core.server.gate import parse_api_keys
    from zllm_core.server.prompt import PromptBuilder
    from zllm_core.server.runtime import ServerConfig

    engine_config = {"device": args.device, "allow_long_context": args.allow_long_context}
    if args.max_model_len:
        engine_config["max_model_len"] = args.max_model_len
    engine = AsyncEngine.from_model(args.model, **engine_config)
    model_dir = resolve_model(args.model)
    config = ServerConfig(
        model_name=args.served_model_name or Path(str(args.model)).name,
        max_output_tokens=args.max_output_tokens, max_model_len=args.max_model_len,
        api_keys=parse_api_keys(args.api_key), max_body_bytes=args.max_body_bytes,
        store_path=args.response_store)
    app = create_app(engine, PromptBuilder.from_model_dir(model_dir, engine.tokenizer), config)
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    host, port = sock.getsockname()[:2]
    # Tests and scripts read this line to find a --port 0 server.
    print(f"zllm serving '{config.model_name}' on http://{host}:{port}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws="websockets-sansio"))
    try:
        server.run(sockets=[sock])
    finally:
        engine.shutdown()
    return 0

