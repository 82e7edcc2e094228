"""Prompt-lookup speculation against plain decoding, same model, same prompts, same run.

    PYTHONPATH=$PWD python bench/speculative.py [--model smollm2] [--k 4] [--new-tokens 128]
                                                [--rounds 3] [--threads 1] [--clock cpu]

Three workloads an agent produces, through the model's chat template, greedy; the two copy
workloads continue an answer that has begun (its first lines), as an agent's turn does once
it is writing the file back:
* code edit: a source file of this repository, to be returned with one name changed;
* tool output echo: a directory listing, to be repeated with one line added;
* free text: a short story (nothing to copy: speculation must cost little there).
Decode tokens/s counts output tokens after the first over the time after the first token;
tokens per step is output tokens over decode steps. Greedy output must be identical with and
without speculation (checked). The two alternate for --rounds rounds and each keeps its best.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from zllm_core.cache.scope import Scope
from zllm_core.dialects import ChatTemplate
from zllm_core.dialects.conversation import Message
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.model.loader import load_model
from zllm_core.model.model_names import resolve_model
from zllm_core.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parents[1]


def workloads() -> dict[str, tuple[str, str]]:
    """name -> (the user's message, the start of the assistant's answer it continues)."""
    code = "\n".join((REPO / "zllm_core/engine/sequence.py").read_text().splitlines()[20:60])
    listing = "\n".join(f"-rw-r--r--  1 dev  staff  {len(p.read_bytes()):>7}  Dec  1 12:00  {p.name}"
                        for p in sorted((REPO / "zllm_core/engine").glob("*.py")))
    return {
        "code edit": (f"Here is a Python file:\n```python\n{code}\n```\nReturn the whole file with "
                      "`num_computed` renamed to `computed`. Output only the code.",
                      "```python\n" + "\n".join(code.splitlines()[:3]) + "\n"),
        "tool output echo": (f"The command `ls -l` printed:\n```\n{listing}\n```\nRepeat that output "
                             "exactly, then add a line for a new file `drafter.py`.",
                             "```\n" + listing.splitlines()[0] + "\n"),
        "free text": ("Write a short story about a lighthouse keeper who finds a message in a bottle.", ""),
    }


def run(engine: LLMEngine, prompt: list[int], new_tokens: int, clock) -> tuple[list[int], float, int]:
    """The output, the seconds after its first token, and the decode steps."""
    engine.add_request(f"r{time.perf_counter_ns()}", prompt, SamplingParams(max_tokens=new_tokens, temperature=0.0))
    out: list[int] = []
    first, steps = None, 0
    while engine.has_unfinished():
        for o in engine.step():
            out += o.new_token_ids
        if first is None and out:
            first = clock()
        elif first is not None:
            steps += 1
    return out, clock() - first, steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    model_dir = resolve_model(args.model)
    model, tokenizer = load_model(model_dir), Tokenizer.from_pretrained(model_dir)
    template = ChatTemplate.from_model_dir(model_dir)
    engines = {k: LLMEngine(model, tokenizer, EngineConfig(speculative_tokens=k, enable_prefix_cache=False),
                            Scope("bench")) for k in (0, args.k)}
    print(f"model {args.model}, K={args.k}, up to {args.new_tokens} new tokens, greedy, torch threads "
          f"{torch.get_num_threads()}, {args.clock} clock, best of {args.rounds} alternating rounds")
    print(f"{'workload':>17} {'tokens':>6} {'plain tok/s':>11} {'spec tok/s':>10} {'ratio':>6} "
          f"{'tok/step':>8} {'accepted':>8}")
    for name, (text, answer) in workloads().items():
        rendered = template.render([Message("user", text)], add_generation_prompt=True) + answer
        prompt = tokenizer.encode(rendered, allowed_special="all")
        best: dict[int, tuple[float, int]] = {}
        outputs = {}
        for _ in range(args.rounds):
            for k, engine in engines.items():
                before = engine.spec_stats.accepted, engine.spec_stats.drafted
                out, seconds, steps = run(engine, prompt, args.new_tokens, clock)
                outputs.setdefault(k, out)
                assert out == outputs[k], "greedy output changed between rounds"
                if k not in best or seconds < best[k][0]:
                    best[k] = (seconds, steps)
                accepted = (engine.spec_stats.accepted - before[0]) / max(1, engine.spec_stats.drafted - before[1])
        assert outputs[0] == outputs[args.k], f"{name}: speculation changed the greedy output"
        n = len(outputs[0]) - 1
        plain, spec = n / best[0][0], n / best[args.k][0]
        print(f"{name:>17} {n + 1:>6} {plain:>11.1f} {spec:>10.1f} {spec / plain:>5.2f}x "
              f"{n / max(1, best[args.k][1]):>8.2f} {accepted:>7.0%}")


if __name__ == "__main__":
    main()
