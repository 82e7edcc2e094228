"""Model runtime vs transformers on the same checkpoint: prefill and decode throughput on CPU.

    PYTHONPATH=$PWD python bench/bench_model.py [--threads 1] [--clock cpu|wall] [--prompt 512] [--decode 32]

Both sides compute logits only for the token that is sampled; ours runs through a real
block pool with the torch reference attention backend, as the engine does.  The two sides
alternate for --rounds rounds and each reports its best round, so load from other
processes on a shared machine hurts both alike.  On a shared machine use one thread and the
cpu clock (process time): wall time there measures the neighbours, not the code.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from typing import Callable

import torch
import transformers

from zllm_core.cache.block_pool import BlockPool, KVLayout
from zllm_core.model.attention_backend import AttentionMetadata, ForwardContext
from zllm_core.model.demo import ensure_demo_model
from zllm_core.model.loader import load_model
from zllm_core.model.torch_attention import TorchAttention

BLOCK = 16
Clock = Callable[[], float]


def ours(model_dir, prompt: list[int], steps: int, clock: Clock) -> tuple[float, float]:
    model = load_model(model_dir)
    cfg = model.config
    n_blocks = -(-(len(prompt) + steps) // BLOCK)
    pool = BlockPool(KVLayout(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, model.dtype, BLOCK), n_blocks)
    table = torch.tensor(pool.allocate(n_blocks), dtype=torch.int64)
    backend = TorchAttention()

    def step(ids: list[int], start: int) -> int:
        n, end = len(ids), start + len(ids)
        positions = torch.arange(start, end)
        meta = AttentionMetadata(torch.tensor([0, n], dtype=torch.int32), torch.tensor([end], dtype=torch.int32),
                                 table.to(torch.int32)[None], table[positions // BLOCK] * BLOCK + positions % BLOCK,
                                 n, end)
        hidden = model(torch.tensor(ids), positions, ForwardContext(meta, pool.kv_caches, backend))
        return int(model.compute_logits(hidden[-1:]).argmax())

    t0 = clock()
    token = step(prompt, 0)
    t1 = clock()
    for i in range(steps):
        token = step([token], len(prompt) + i)
    return t1 - t0, clock() - t1


def reference(model_dir, prompt: list[int], steps: int, clock: Clock) -> tuple[float, float]:
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    t0 = clock()
    out = model(input_ids=torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
    t1 = clock()
    for _ in range(steps):
        token = int(out.logits[0, -1].argmax())
        out = model(input_ids=torch.tensor([[token]]), use_cache=True, logits_to_keep=1, cache=out[1])
    return t1 - t0, clock() - t1


def medium_checkpoint(path: str) -> str:
    """A Qwen3 of ~0.2B parameters (random): large enough that matmuls, not Python, dominate."""
    config = transformers.Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                                      num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
                                      head_dim=64, tie_word_embeddings=True, max_position_embeddings=4096)
    transformers.Qwen3ForCausalLM(config).save_pretrained(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    prompt = torch.randint(0, 150000, (args.prompt,), generator=torch.Generator().manual_seed(0)).tolist()
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        models = {"zllm-demo (Qwen3 4L h256)": ensure_demo_model(), "Qwen3 8L h1024": medium_checkpoint(tmp)}
        print(f"threads={args.threads} clock={args.clock} prompt={args.prompt} decode={args.decode}")
        print(f"{'model':28} {'phase':8} {'zllm tok/s':>11} {'HF tok/s':>10} {'ratio':>6}")
        for name, path in models.items():
            reference(path, prompt[:32], 2, clock)  # warm up both sides
            ours(path, prompt[:32], 2, clock)
            rounds = [(reference(path, prompt, args.decode, clock), ours(path, prompt, args.decode, clock))
                      for _ in range(args.rounds)]
            ref_times = [min(r[0][i] for r in rounds) for i in range(2)]
            our_times = [min(r[1][i] for r in rounds) for i in range(2)]
            for phase, n, mine, theirs in zip(("prefill", "decode"), (args.prompt, args.decode), our_times, ref_times):
                print(f"{name:28} {phase:8} {n / mine:11.1f} {n / theirs:10.1f} {theirs / mine:6.2f}x")


if __name__ == "__main__":
    main()
