"""Engine throughput against transformers on the same weights, in the same run.

    python bench/engine.py [--model zllm-demo|smollm2|PATH] [--prompt-len 256] [--new-tokens 32]
                           [--batches 1 16] [--threads N] [--clock wall|cpu]

Prefill tokens/s: batch x prompt_len / time to the first token.  Decode tokens/s:
batch x (new_tokens - 1) / (time to the last token - time to the first).  Both engines
run greedy with fixed output length, fp32, on the same weights (a GGUF file is dequantised by
each: transformers through ``gguf_file=``); ratios are zllm_core / transformers (higher
is better for zllm_core).  The two alternate for --rounds rounds and each keeps its best,
so load from other processes hurts both alike; on a shared machine use --threads 1
--clock cpu (process time measures the code, wall time the neighbours).
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

from zllm_core.cache.scope import Scope
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.model.model_names import resolve_model
from zllm_core.model.loader import load_model


def prompts(batch: int, length: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1000, min(100000, vocab_size)) for _ in range(length)] for _ in range(batch)]


def load_reference(model_path: Path):
    from transformers import AutoModelForCausalLM

    if model_path.is_file():  # GGUF
        return AutoModelForCausalLM.from_pretrained(model_path.parent, gguf_file=model_path.name,
                                                    dtype=torch.float32).eval()
    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()


def time_zllm(engine: LLMEngine, batch: list[list[int]], new_tokens: int, clock) -> tuple[float, float]:
    """Seconds to the first token of every request, and to the last."""
    params = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    start = clock()
    for i, p in enumerate(batch):
        engine.add_request(f"b{i}-{start}", p, params)
    first = None
    seen: set[str] = set()
    while engine.has_unfinished():
        for out in engine.step():
            seen.add(out.request_id)
        if first is None and len(seen) == len(batch):
            first = clock()
    return first - start, clock() - start


class _Clock:
    """A transformers streamer that notes when the first new token arrives: ``generate``
    calls ``put`` with the prompt, then once per step.  Both times come from one run, as
    for zllm_core (two runs of different lengths let one slow short run inflate decode)."""

    def __init__(self, clock):
        self.clock, self.puts, self.first = clock, 0, None

    def put(self, _ids) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first = self.clock()

    def end(self) -> None:
        pass


def time_hf(model, batch: list[list[int]], new_tokens: int, clock) -> tuple[float, float]:
    ids = torch.tensor(batch)
    streamer = _Clock(clock)
    start = clock()
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, streamer=streamer)
    return streamer.first - start, clock() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="zllm-demo")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.clock == "wall" else time.process_time

    model_path = resolve_model(args.model)
    ours = LLMEngine(load_model(model_path), None,
                     EngineConfig(enable_prefix_cache=False, max_num_batched_tokens=8192), Scope("bench"))
    hf = load_reference(model_path)
    print(f"model {args.model}, prompt {args.prompt_len} tokens, {args.new_tokens} new tokens, "
          f"torch threads {torch.get_num_threads()}, {args.clock} clock, best of {args.rounds} alternating rounds")
    print(f"{'batch':>5} {'metric':>16} {'zllm_core':>12} {'transformers':>13} {'ratio':>7}")
    for b in args.batches:
        batch = prompts(b, args.prompt_len, ours.model.config.vocab_size)
        time_zllm(ours, batch, 2, clock)  # warm up both
        time_hf(hf, batch, 2, clock)
        zs, hs = [], []
        for _ in range(args.rounds):
            zs.append(time_zllm(ours, batch, args.new_tokens, clock))
            hs.append(time_hf(hf, batch, args.new_tokens, clock))
        z_prefill, h_prefill = min(t[0] for t in zs), min(t[0] for t in hs)
        z_decode, h_decode = min(t[1] - t[0] for t in zs), min(t[1] - t[0] for t in hs)
        rows = [("prefill tok/s", b * args.prompt_len / z_prefill, b * args.prompt_len / h_prefill),
                ("decode tok/s", b * (args.new_tokens - 1) / z_decode, b * (args.new_tokens - 1) / h_decode)]
        for name, zv, hv in rows:
            print(f"{b:>5} {name:>16} {zv:>12.1f} {hv:>13.1f} {zv / hv:>6.2f}x")


if __name__ == "__main__":
    main()
