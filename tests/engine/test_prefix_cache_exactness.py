"""Reusing cached blocks changes nothing the model computes (issue: prefix cache, device tier)."""
import random

from engine_helpers import full_recompute_logits, run_all

from zllm_core.cache.scope import CacheHint
from zllm_core.engine.sampling_params import SamplingParams


def first_step_logits(engine, prompt, **kw):
    seen = []
    params = SamplingParams(max_tokens=4, temperature=0.0,
                            logits_hook=lambda tokens, row: seen.append(row.clone()))
    (out,) = run_all(engine, [prompt], params, **kw)
    return seen[0], out


def test_hits_at_every_offset_relative_to_block_boundaries_equal_a_full_prefill(make_engine):
    rng = random.Random(11)
    base = [rng.randrange(1000, 150000) for _ in range(50)]
    cached = make_engine()
    cold = make_engine(enable_prefix_cache=False)
    run_all(cached, [base])
    for shared in range(14, 50):  # the fork falls at every offset within blocks 1..3
        prompt = base[:shared] + [rng.randrange(1000, 150000) for _ in range(5)]
        logits, out = first_step_logits(cached, prompt)
        reference = full_recompute_logits(cold, prompt)[-1]
        assert (logits - reference).abs().max() <= 1e-5, shared
        assert out == run_all(cold, [prompt], SamplingParams(max_tokens=4, temperature=0.0))[0]
    hits = cached.kv.cache.stats
    assert hits.cached_tokens == sum((s // 16) * 16 for s in range(14, 50))


def test_next_turn_hits_the_blocks_this_turn_decoded(make_engine):
    engine = make_engine()
    rng = random.Random(5)
    prompt = [rng.randrange(1000, 150000) for _ in range(20)]
    (answer,) = run_all(engine, [prompt], SamplingParams(max_tokens=30, temperature=0.0))
    turn2 = prompt + answer + [rng.randrange(1000, 150000) for _ in range(3)]
    engine.add_request("turn2", turn2, SamplingParams(max_tokens=1, temperature=0.0))
    (out,) = engine.step()
    assert out.cached_tokens == (len(prompt) + len(answer) - 1) // 16 * 16 >= 32


def test_a_tenant_scope_never_hits_another_tenants_prefix(make_engine):
    engine = make_engine()
    prompt = list(range(2000, 2040))
    run_all(engine, [prompt], cache=CacheHint(tenant="a"))
    engine.add_request("b", prompt, SamplingParams(max_tokens=1, temperature=0.0), CacheHint(tenant="b"))
    assert engine.step()[0].cached_tokens == 0
    engine.add_request("a2", prompt, SamplingParams(max_tokens=1, temperature=0.0), CacheHint(tenant="a"))
    assert engine.step()[0].cached_tokens == 32


def test_after_every_request_finishes_and_the_index_is_cleared_the_pool_is_empty(make_engine):
    engine = make_engine()
    prefix = list(range(3000, 3040))
    run_all(engine, [prefix + [i] * 3 for i in range(6)])
    assert len(engine.kv.cache.index) > 0
    engine.kv.cache.clear()
    assert engine.kv.pool.is_empty()
