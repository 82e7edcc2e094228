"""GPU full tokenization against the CPU path and tiktoken, in the same run.

Per size (10K, 100K, 1M and 4M characters of the standard library's Python sources), three
paths timed in interleaved rounds: the GPU path (GpuTokenizer.encode: a str in, a uint32 array of
ids on the host out, so the copies, the CUDA graph and the wait are all in), the CPU path
(encode_to_numpy on one thread) and tiktoken (encode_to_numpy), all three returning uint32
arrays. The table gives each path's latency p50
and p99, GB/s of UTF-8 at p50, and the GPU path's speedup over it: the median of the per-round
ratios with their interquartile range. A batch row follows: many texts through each path's batch
API (the GPU path: one run, arrays; the CPU path and tiktoken: their thread pools, lists),
GB/s at p50.
Every path's ids are checked against tiktoken's in the same run.

--emulated runs the GPU path as its kernels emulated on this CPU (tests/kernels/
gpu_tokenize_emulated.py): the same table's shape at small sizes, so the benchmark itself is
tested on machines without a GPU. Its times say nothing about a GPU.

    PYTHONPATH=$PWD python bench/tokenize_gpu.py [--family cl100k_base] [--sizes 10000,100000,...]
        [--rounds 30] [--batch 64x65536] [--emulated] [--out table.md]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.tokenizer import corpus, references  # noqa: E402
from zllm_core.tokenizer import Tokenizer  # noqa: E402
from zllm_core.tokenizer.gpu_tokenizer import CudaBackend, GpuTokenizer, cuda_available  # noqa: E402

PATHS = ("gpu", "cpu", "tiktoken")


def code_text(chars: int) -> str:
    """Python sources of the standard library, repeated if the sample is shorter."""
    text = "".join(corpus.stdlib_sources(full=True, limit_chars=min(chars, 8_000_000)))
    return (text * (chars // len(text) + 1))[:chars]


def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q))


def paths(tok: Tokenizer, gpu: GpuTokenizer, enc) -> dict:
    policy = tok.special_policy(frozenset())
    return {
        "gpu": lambda text: gpu.encode(text, policy),
        "cpu": lambda text: tok.cpu_encode(text, policy, as_array=True),
        "tiktoken": lambda text: enc.encode_to_numpy(text),
    }


def batch_paths(tok: Tokenizer, gpu: GpuTokenizer, enc) -> dict:
    policy = tok.special_policy(frozenset())
    return {
        "gpu": lambda texts: gpu.encode_batch(texts, policy),
        "cpu": lambda texts: tok.native.encode_batch(texts, policy, 16),
        "tiktoken": lambda texts: enc.encode_batch(texts, num_threads=16),
    }


def interleaved(calls: dict, arg, rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each path, the order rotating from round to round."""
    times = {name: [] for name in calls}
    names = list(calls)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            calls[name](arg)
            times[name].append(time.perf_counter() - start)
    return times


def check(calls: dict, arg, expected) -> None:
    for name, call in calls.items():
        got = call(arg)
        same = ([np.asarray(g).tolist() for g in got] == expected if isinstance(arg, list)
                else np.asarray(got).tolist() == expected)
        if not same:
            raise SystemExit(f"{name}: ids differ from tiktoken's")


def rows_for(label: str, nbytes: int, times: dict[str, list[float]]) -> list[list[str]]:
    rows = []
    for name in PATHS:
        t = times[name]
        ratios = [other / mine for other, mine in zip(t, times["gpu"])]
        speedup = "" if name == "gpu" else (f"{statistics.median(ratios):.3g}x "
                                            f"[{percentile(ratios, 25):.3g}, {percentile(ratios, 75):.3g}]")
        p50 = percentile(t, 50)
        rows.append([label, name, f"{p50 * 1e3:.3f}", f"{percentile(t, 99) * 1e3:.3f}",
                     f"{nbytes / p50 / 1e9:.3g}", speedup])
    return rows


def table(rows: list[list[str]]) -> str:
    head = ["text", "path", "p50 ms", "p99 ms", "GB/s", "gpu speedup [IQR]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", default="cl100k_base")
    p.add_argument("--sizes", default=None, help="characters, comma-separated")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--batch", default=None, help="TEXTSxCHARS, e.g. 64x65536")
    p.add_argument("--emulated", action="store_true", help="the GPU kernels emulated on this CPU")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    sizes = [int(s) for s in (a.sizes or ("2000,8000" if a.emulated else "10000,100000,1000000,4000000")).split(",")]
    count, chars = (int(x) for x in (a.batch or ("4x2000" if a.emulated else "64x65536")).split("x"))
    tok = Tokenizer.from_family(a.family)
    if a.emulated:
        sys.path.insert(0, str(REPO / "tests" / "kernels"))
        from gpu_tokenize_emulated import EmulatedBackend
        backend, where = EmulatedBackend, "emulated on this CPU"
    elif cuda_available():
        backend, where = CudaBackend, "CUDA"
    else:
        raise SystemExit("no CUDA device (or no CUDA build): run with --emulated")
    gpu = GpuTokenizer(tok, backend)
    enc = references.tiktoken_encoding(a.family)
    text = code_text(max(sizes + [count * chars]))
    rows = []
    single = paths(tok, gpu, enc)
    for size in sizes:
        sample = text[:size]
        check(single, sample, enc.encode(sample))
        rows += rows_for(f"{size:,} chars", len(sample.encode()), interleaved(single, sample, a.rounds))
    docs = [text[k * chars:(k + 1) * chars] for k in range(count)]
    batches = batch_paths(tok, gpu, enc)
    check(batches, docs, enc.encode_batch(docs))
    rows += rows_for(f"batch {count}x{chars:,}", sum(len(d.encode()) for d in docs),
                     interleaved(batches, docs, max(3, a.rounds // 3)))
    out = (f"GPU path: {where}; {a.family}; {a.rounds} interleaved rounds; every path's ids equal tiktoken's\n\n"
           + table(rows))
    print(out)
    if a.out:
        a.out.write_text(out + "\n")
    return out


if __name__ == "__main__":
    main()
