"""A prefix restored from the SSD tier changes nothing the model computes (issue #22)."""
import random

import pytest
from engine_helpers import full_recompute_logits, run_all

from zllm_core.engine.sampling_params import SamplingParams

BLOCK_BYTES = 64 << 10  # the demo model's K/V for one 16-token block
GREEDY = SamplingParams(max_tokens=6, temperature=0.0)


def random_tokens(rng, n):
    return [rng.randrange(1000, 150000) for _ in range(n)]


@pytest.fixture
def small_engines(make_engine, tmp_path):
    """An engine whose 20-block pool holds one 150-token prompt at a time, backed by an SSD
    tier in ``tmp_path``, and a cold engine to compare with."""
    def make():
        return make_engine(kv_cache_bytes=20 * BLOCK_BYTES, ssd_cache_dir=str(tmp_path))
    return make, make_engine(enable_prefix_cache=False)


def push_out(engine, rng):
    """Prompts of other conversations until the first one's blocks are evicted to disk."""
    for _ in range(2):
        run_all(engine, [random_tokens(rng, 150)], GREEDY)
    engine.kv.cache.ssd.writer.flush()


def first_logits_and_output(engine, prompt, **kw):
    seen = []
    params = SamplingParams(max_tokens=6, temperature=0.0, logits_hook=lambda t, row: seen.append(row.clone()))
    (out,) = run_all(engine, [prompt], params, **kw)
    return seen[0], out


@pytest.mark.parametrize("shared", [96, 101], ids=["block-aligned", "unaligned"])
def test_logits_after_an_ssd_restore_equal_a_full_prefill(small_engines, shared):
    make, cold = small_engines
    engine, rng = make(), random.Random(shared)
    base = random_tokens(rng, 150)
    run_all(engine, [base], GREEDY)
    push_out(engine, rng)
    prompt = base[:shared] + random_tokens(rng, 5)
    cached_before = engine.kv.cache.stats.cached_tokens
    logits, out = first_logits_and_output(engine, prompt)
    assert (logits - full_recompute_logits(cold, prompt)[-1]).abs().max() <= 1e-5
    assert out == run_all(cold, [prompt], GREEDY)[0]
    assert engine.kv.cache.stats.lookups["ssd_longest_prefix"] == 1
    assert engine.kv.cache.stats.cached_tokens - cached_before == shared // 16 * 16
    assert engine.metrics()["ssd"]["restored_tokens"] >= 64  # the rest was still on the device


def test_a_restarted_engine_restores_the_conversation_from_disk(small_engines):
    make, cold = small_engines
    engine, rng = make(), random.Random(3)
    turn1 = random_tokens(rng, 120)
    (answer,) = run_all(engine, [turn1], GREEDY)
    engine.close()  # graceful shutdown: resident blocks go to disk
    turn2 = turn1 + answer + random_tokens(rng, 4)
    restarted = make()
    engine_out = run_all(restarted, [turn2], GREEDY)
    assert engine_out == run_all(cold, [turn2], GREEDY)
    assert restarted.kv.cache.stats.cached_tokens == (len(turn1) + len(answer) - 1) // 16 * 16


def test_a_corrupt_snapshot_is_counted_and_the_request_served_as_a_miss(small_engines, tmp_path):
    make, cold = small_engines
    engine, rng = make(), random.Random(4)
    base = random_tokens(rng, 150)
    run_all(engine, [base], GREEDY)
    push_out(engine, rng)
    for blob in (tmp_path / "blobs").iterdir():
        raw = bytearray(blob.read_bytes())
        raw[-100] ^= 0x40
        blob.write_bytes(raw)
    prompt = base + random_tokens(rng, 3)
    assert run_all(engine, [prompt], GREEDY) == run_all(cold, [prompt], GREEDY)
    ssd = engine.metrics()["ssd"]
    assert ssd["quarantined"] >= 1 and ssd["hits"] == 0
    engine.kv.cache.clear()
    assert engine.kv.pool.is_empty()
