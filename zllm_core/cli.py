"""The ``zllm`` command line."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from zllm_core.model.model_names import DEFAULT_MODEL


def add_generate_parser(sub) -> None:
    p = sub.add_parser("generate", help="complete a prompt on a model (default: smollm2)")
    p.add_argument("prompt")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="smollm2 (default), zllm-demo, a .gguf file, or a HF or GGUF model directory")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:N")
    p.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    from zllm_core.engine.llm import LLM
    from zllm_core.engine.sampling_params import SamplingParams

    llm = LLM(args.model, device=args.device)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                            top_p=args.top_p, seed=args.seed)
    (out,) = llm.generate(args.prompt, params)
    print(out.text)
    print(f"[{len(out.prompt_ids)} prompt tokens, {len(out.token_ids)} generated, "
          f"finish: {out.finish_reason}]", file=sys.stderr)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="zllm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_generate_parser(sub)
    from zllm_core.server.cli import add_serve_parser
    add_serve_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        parser.exit(2, f"zllm: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
