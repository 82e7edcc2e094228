"""Prompt-lookup speculation against plain decoding, same model, same prompts, same run.

    PYTHONPATH=$PWD python bench/speculative.py [--model smollm2] [--k 4] [--new-tokens 128]
                                                [--rounds 3] [--threads 1] [--clock cpu]

Three workloads an agent produces, through the model's chat template, greedy; the two copy
workloads continue an answer that has begun (its first lines), as an agent's turn does once
it is writing the file back:
* code edit: the first file an agent read in the agent trace (bench/trace_replay.py), to be
  returned with one name changed;
* tool output echo: the first directory listing in the trace, repeated with one line added;
* free text: a short story (nothing to copy: speculation must cost little there).
Decode tokens/s counts output tokens after the first over the time after the first token;
tokens per step is output tokens over decode steps. Greedy output must be identical with and
without speculation (checked). The two alternate for --rounds rounds and each keeps its best.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from zllm_core.cache.scope import Scope
from zllm_core.dialects import ChatTemplate
from zllm_core.dialects.conversation import Message
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.model.loader import load_model
from zllm_core.model.model_names import resolve_model
from zllm_core.tokenizer import Tokenizer
from trace_replay import agent_trace  # bench/ is on sys.path when run as a script



def trace_outputs() -> tuple[str, str]:
    """From the agent trace: the first file an agent read (its code, line numbers dropped) and
    the first directory listing a shell call printed."""
    names, code, listing = {}, None, None
    with agent_trace().open() as f:
        for line in f:
            for event in json.loads(line)["events"]:
                for call in event.get("tool_calls") or []:
                    names[call["id"]] = call["function"]["name"]
                if event.get("role") != "tool":
                    continue
                text, tool = event["content"], names.get(event["tool_call_id"])
                if code is None and tool == "read_file" and text.count("\n") >= 40:
                    code = "\n".join(row.split("\t", 1)[-1] for row in text.splitlines()[:40])
                if listing is None and tool == "shell" and text.startswith("total "):
                    listing = "\n".join(text.splitlines()[:25])
                if code and listing:
                    return code, listing
    raise RuntimeError("the trace holds no read_file and ls output")


def workloads() -> dict[str, tuple[str, str]]:
    """name -> (the user's message, the start of the assistant's answer it continues)."""
    code, listing = trace_outputs()
    return {
        "code edit": (f"Here is a Python file:\n```python\n{code}\n```\nReturn the whole file with "
                      "its first function renamed. Output only the code.",
                      "```python\n" + "\n".join(code.splitlines()[:3]) + "\n"),
        "tool output echo": (f"The command `ls -l` printed:\n```\n{listing}\n```\nRepeat that output "
                             "exactly, then add a line for a new file `drafter.py`.",
                             "```\n" + "\n".join(listing.splitlines()[:2]) + "\n"),
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
