"""Paged-attention kernels: decode bandwidth and append-prefill throughput.

Decode reads every cached K/V byte once, so its figure of merit is achieved bandwidth
(bytes of K/V read / time), reported against a device-to-device copy measured in the same
run (DRAM bytes read + written / time).  Peers are timed in the same run: FlashInfer's paged
decode when importable, and torch SDPA over contiguous K/V for prefill.

    python bench/attention.py                 # CUDA: the full grid
    python bench/attention.py --smoke         # CPU (Triton interpreter): tiny shapes, no ratios
    python bench/attention.py --out table.md  # also write the markdown table there
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch.nn.attention.bias import causal_lower_right  # noqa: E402  (imports triton)

from zllm_core.model.cuda_attention import cuda_paged_decode, fits_kernel, native_decode  # noqa: E402
from zllm_core.model.triton_attention import kernels  # noqa: E402

from cuda_timing import cuda_seconds  # noqa: E402  (bench/ is on sys.path when run as a script)

TARGET = (64, 32768)  # the acceptance point: batch 64 at 32K tokens...
TARGET_RATIO = 0.70   # ...must reach 70% of copy bandwidth


@dataclass(frozen=True)
class Model:
    """Llama-3-8B's attention shape, the common case for a 32K-1M token agent context."""

    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    block_size: int = 16
    dtype: torch.dtype = torch.bfloat16

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_dim * torch.empty((), dtype=self.dtype).element_size()


def timed(fn, device: torch.device, reps: int) -> float:
    """Mean seconds per call, after one warm-up call (compiles, plans, caches)."""
    fn()
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) / reps
    return cuda_seconds(fn, reps)


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    """DRAM bytes moved per second by a device-to-device copy (read + write)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / timed(lambda: dst.copy_(src), device, reps=20)


def pool(model: Model, num_tokens: int, device: torch.device):
    """K/V caches with room for ``num_tokens`` tokens, random (never zero) contents."""
    shape = (-(-num_tokens // model.block_size) + 1, model.block_size, model.num_kv_heads, model.head_dim)
    k = torch.randn(shape, dtype=model.dtype, device=device)
    v = torch.randn(shape, dtype=model.dtype, device=device)
    return k, v


def block_tables(batch: int, blocks_per_seq: int, num_blocks: int, device: torch.device) -> torch.Tensor:
    """Each sequence gets distinct blocks in shuffled order, as a long-lived pool would."""
    ids = torch.randperm(num_blocks, device=device)[:batch * blocks_per_seq]
    return ids.view(batch, blocks_per_seq).to(torch.int32)


def decode_peers(model: Model, device: torch.device) -> dict:
    """name -> fn(q, k, v, tables, seq_lens, max_len, scale) for every decode available."""
    peers = {"triton": kernels.paged_decode}
    if device.type == "cuda" and native_decode() is not None:
        peers["cuda"] = cuda_paged_decode
    try:
        import flashinfer
        peers["flashinfer"] = flashinfer_decode(flashinfer, model, device)
    except ImportError:
        pass
    return peers


def flashinfer_decode(flashinfer, model: Model, device: torch.device):
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")

    def run(q, k, v, tables, seq_lens, max_len, scale):
        # Planning is per batch shape and done once per row, outside the steady state.
        key = (tables.data_ptr(), max_len)
        if getattr(run, "planned", None) != key:
            batch, bs = tables.shape[0], model.block_size
            used = -(-seq_lens // bs)
            indptr = torch.cat([torch.zeros(1, dtype=torch.int32, device=device), used.cumsum(0).to(torch.int32)])
            indices = torch.cat([tables[i, :used[i]] for i in range(batch)])
            last = (seq_lens - (used - 1) * bs).to(torch.int32)
            wrapper.plan(indptr, indices, last, model.num_heads, model.num_kv_heads, model.head_dim, bs,
                         pos_encoding_mode="NONE", sm_scale=scale, q_data_type=model.dtype,
                         kv_data_type=model.dtype)
            run.planned = key
        return wrapper.run(q, (k, v))
    return run


def bench_decode(model: Model, device: torch.device, grid, copy_bw: float, max_kv_bytes: int, reps: int):
    rows = []
    tokens = max(b * -(-n // model.block_size) * model.block_size for b, n in grid
                 if b * n * model.kv_bytes_per_token <= max_kv_bytes)
    k, v = pool(model, tokens, device)
    peers = decode_peers(model, device)
    scale = model.head_dim ** -0.5
    for batch, ctx in grid:
        kv_bytes = batch * ctx * model.kv_bytes_per_token
        if kv_bytes > max_kv_bytes:
            rows.append({"batch": batch, "context": ctx, "note": f"skipped: {kv_bytes / 2**30:.0f} GiB of K/V"})
            continue
        q = torch.randn(batch, model.num_heads, model.head_dim, dtype=model.dtype, device=device)
        tables = block_tables(batch, -(-ctx // model.block_size), k.shape[0], device)
        seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device=device)
        row = {"batch": batch, "context": ctx, "GiB": kv_bytes / 2**30}
        for name, fn in peers.items():
            if name == "cuda" and not fits_kernel(q, k, v):
                continue
            try:
                sec = timed(lambda: fn(q, k, v, tables, seq_lens, ctx, scale), device, reps)
            except Exception as err:  # a peer's API drifting must not hide our numbers
                row[name] = f"error: {type(err).__name__}"
                continue
            row[name] = (sec, kv_bytes / sec)
        rows.append(row)
    return rows, list(peers)


def sdpa_prefill(q, k, v):
    """torch SDPA over contiguous K/V with KV heads already repeated: q [B, Hq, L, D] sees
    the cache and itself causally (a lower-right causal bias, never a materialised mask)."""
    mask = causal_lower_right(q.shape[2], k.shape[2])
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def bench_prefill(model: Model, device: torch.device, grid, reps: int):
    rows = []
    scale = model.head_dim ** -0.5
    for batch, qlen, cached in grid:
        total = cached + qlen
        blocks_per_seq = -(-total // model.block_size)
        k, v = pool(model, batch * blocks_per_seq * model.block_size, device)
        tables = block_tables(batch, blocks_per_seq, k.shape[0], device)
        q = torch.randn(batch * qlen, model.num_heads, model.head_dim, dtype=model.dtype, device=device)
        starts = torch.arange(0, batch * qlen + 1, qlen, dtype=torch.int32, device=device)
        seq_lens = torch.full((batch,), total, dtype=torch.int32, device=device)
        # Causal FLOPs: query j of a chunk sees cached + j + 1 keys, 4 flops per (key, dim, head).
        flops = 4 * batch * model.num_heads * model.head_dim * (qlen * cached + qlen * (qlen + 1) // 2)
        sec = timed(lambda: kernels.paged_prefill(q, k, v, tables, seq_lens, starts, qlen, scale), device, reps)
        row = {"batch": batch, "new": qlen, "cached": cached, "triton": (sec, flops / sec)}
        group = model.num_heads // model.num_kv_heads
        ks, vs = (c[tables.long()].flatten(1, 2)[:, :total].transpose(1, 2).repeat_interleave(group, 1)
                  for c in (k, v))
        qs = q.view(batch, qlen, model.num_heads, model.head_dim).transpose(1, 2)
        try:
            peer = timed(lambda: sdpa_prefill(qs, ks, vs), device, reps)
            row["sdpa"] = (peer, flops / peer)
        except Exception as err:
            row["sdpa"] = f"error: {type(err).__name__}"
        rows.append(row)
        del k, v, ks, vs
    return rows


def decode_table(rows, peers, copy_bw: float, ratios: bool) -> list[str]:
    head = "| batch | context | K/V GiB | " + " | ".join(
        f"{p} µs | {p} TB/s" + (f" | {p} / copy" if ratios else "") for p in peers) + " |"
    lines = [head, "|" + "---|" * (3 + len(peers) * (3 if ratios else 2))]
    for r in rows:
        if "note" in r:
            lines.append(f"| {r['batch']} | {r['context']} | {r['note']} |")
            continue
        cells = [str(r["batch"]), str(r["context"]), f"{r['GiB']:.2f}"]
        for p in peers:
            got = r.get(p, "n/a")
            if isinstance(got, tuple):
                cells += [f"{got[0] * 1e6:.1f}", f"{got[1] / 1e12:.2f}"] + ([f"{got[1] / copy_bw:.0%}"] if ratios else [])
            else:
                cells += [got, "-"] + (["-"] if ratios else [])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def prefill_table(rows, ratios: bool) -> list[str]:
    lines = ["| batch | new tokens | cached | triton ms | triton TFLOP/s | sdpa ms | sdpa TFLOP/s | sdpa time / triton time |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, tf = r["triton"]
        cells = [str(r["batch"]), str(r["new"]), str(r["cached"]), f"{t * 1e3:.2f}", f"{tf / 1e12:.1f}"]
        if isinstance(r["sdpa"], tuple):
            s, sf = r["sdpa"]
            cells += [f"{s * 1e3:.2f}", f"{sf / 1e12:.1f}", f"{s / t:.2f}x" if ratios else "-"]
        else:
            cells += [r["sdpa"], "-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def verdict(rows, copy_bw: float) -> str:
    for r in rows:
        if (r["batch"], r["context"]) == TARGET and isinstance(r.get("triton"), tuple):
            best = max(r[p][1] for p in ("triton", "cuda") if isinstance(r.get(p), tuple))
            ok = best >= TARGET_RATIO * copy_bw
            return (f"acceptance (batch {TARGET[0]}, {TARGET[1]} tokens): best {best / copy_bw:.0%} "
                    f"of copy bandwidth -> {'PASS' if ok else 'FAIL'} (need {TARGET_RATIO:.0%})")
    return "acceptance point not measured"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (the CPU default)")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--max-kv-gib", type=float, default=40.0, help="skip decode rows needing more K/V")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    smoke = args.smoke or device.type != "cuda"
    torch.manual_seed(0)
    if smoke:
        model = Model(num_heads=4, num_kv_heads=2, head_dim=64)
        decode_grid, prefill_grid, reps = [(1, 256), (4, 1024)], [(1, 64, 0), (2, 32, 128)], 1
    else:
        model = Model()
        decode_grid = [(b, n) for b in (1, 8, 64, 256) for n in (1024, 8192, 32768, 131072)]
        prefill_grid = [(1, 2048, 0), (1, 2048, 32768), (4, 512, 8192), (8, 4096, 0), (1, 8192, 131072 - 8192)]
        reps = 10
    copy_bw = copy_bandwidth(device, (256 if smoke else 4096) << 20)
    drows, peers = bench_decode(model, device, decode_grid, copy_bw, int(args.max_kv_gib * 2**30), reps)
    prows = bench_prefill(model, device, prefill_grid, reps)
    ratios = device.type == "cuda"  # interpreted kernels against a memcpy say nothing
    card = torch.cuda.get_device_name(device) if ratios else "CPU (Triton interpreter, smoke only)"
    lines = [f"device: {card}; {time.strftime('%Y-%m-%d')}; torch {torch.__version__}",
             f"model: {model.num_heads} q heads, {model.num_kv_heads} kv heads, head_dim {model.head_dim}, "
             f"{str(model.dtype).removeprefix('torch.')}, block {model.block_size}",
             f"device-to-device copy: {copy_bw / 1e12:.2f} TB/s (read + write)", "", "decode:", ""]
    lines += decode_table(drows, peers, copy_bw, ratios)
    lines += ["", "append-prefill (FLOP/s counts causal work only):", ""] + prefill_table(prows, ratios)
    if ratios:
        lines += ["", verdict(drows, copy_bw)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
