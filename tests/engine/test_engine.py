"""The engine on the real demo model: exactness of paged execution, batching, lifecycle."""
import json
import random

import numpy as np
import pytest
import torch
from engine_helpers import GREEDY, full_recompute_logits, random_prompts, recording, run_all

from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.model.demo import CONFIG


def test_paged_prefill_and_decode_equal_a_full_recompute(make_engine):
    engine = make_engine(enable_prefix_cache=False)
    prompt = random_prompts(1, 40, 41)[0]  # spans three blocks
    params = SamplingParams(max_tokens=20, temperature=0.0)
    seen = recording(params)
    (out,) = run_all(engine, [prompt], params)
    full = full_recompute_logits(engine, prompt + out)
    stepwise = torch.stack(seen)
    torch.testing.assert_close(stepwise, full[len(prompt) - 1:-1], atol=1e-4, rtol=0)
    assert out == full[len(prompt) - 1:-1].argmax(-1).tolist()


def test_batch_of_16_mixed_lengths_equals_each_alone(make_engine):
    engine = make_engine(max_num_batched_tokens=256)
    prompts = random_prompts(16)
    together = run_all(engine, prompts)
    alone = [run_all(make_engine(enable_prefix_cache=False), [p])[0] for p in prompts]
    assert together == alone


def test_chunked_prefill_gives_the_same_tokens(make_engine):
    prompts = random_prompts(4, 60, 90, seed=3)
    whole = run_all(make_engine(enable_prefix_cache=False), prompts)
    chunked = run_all(make_engine(enable_prefix_cache=False, max_num_batched_tokens=24), prompts)
    assert whole == chunked


@pytest.mark.parametrize("speculative", [0, 4])
def test_thousand_random_requests_with_cancellations_and_preemptions_leave_the_pool_empty(make_engine, demo_model,
                                                                                          speculative):
    block_bytes = 16 * 2 * 2 * 64 * 4 * demo_model.config.num_layers
    engine = make_engine(kv_cache_bytes=12 * block_bytes, max_num_seqs=16, max_num_batched_tokens=192,
                         speculative_tokens=speculative)
    assert engine.kv.pool.num_blocks == 12  # 16 running sequences outgrow it: preemption is forced
    rng = random.Random(7)
    pending = list(range(1000))
    live: list[str] = []
    finished = 0
    while pending or engine.has_unfinished():
        while pending and len(live) < 32:
            i = pending.pop()
            prompt = [rng.randrange(1000, 150000) for _ in range(rng.randrange(1, 30))]
            prompt = prompt if rng.random() < 0.7 else [11, 22, 33, 44] * 6 + prompt  # some share a prefix (and drafts)
            engine.add_request(f"r{i}", prompt, SamplingParams(max_tokens=rng.randrange(1, 24),
                                                                temperature=rng.choice([0.0, 0.8]), seed=i))
            live.append(f"r{i}")
        if rng.random() < 0.1 and live:
            victim = live.pop(rng.randrange(len(live)))
            engine.abort(victim)
        for out in engine.step():
            if out.finished:
                finished += 1
                live.remove(out.request_id)
    assert engine.scheduler.num_preemptions > 0 and finished > 500
    assert (engine.spec_stats.accepted > 0) == bool(speculative)
    engine.kv.cache.clear()
    assert engine.kv.pool.is_empty()


def test_seeded_sampling_is_reproducible_and_seeds_differ(make_engine):
    engine = make_engine()
    p = random_prompts(1)[0]
    a = run_all(engine, [p, p], SamplingParams(max_tokens=8, temperature=1.0, seed=1))
    b = run_all(engine, [p], SamplingParams(max_tokens=8, temperature=1.0, seed=1))
    c = run_all(engine, [p], SamplingParams(max_tokens=8, temperature=1.0, seed=2))
    assert a[0] == a[1] == b[0] and c[0] != b[0]


def test_stop_token_ids_and_max_tokens_finish_requests(make_engine):
    engine = make_engine()
    p = random_prompts(1)[0]
    (free,) = run_all(engine, [p])
    engine.add_request("s", p, SamplingParams(max_tokens=12, temperature=0.0, stop_token_ids=[free[2]]))
    outs = []
    while engine.has_unfinished():
        outs += engine.step()
    assert [o.new_token_ids[0] for o in outs] == free[:free.index(free[2]) + 1]
    assert outs[-1].finish_reason == "stop"


@pytest.mark.parametrize("bad, message", [
    (dict(max_tokens=-1), "max_tokens"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(temperature=-0.1), "temperature"),
])
def test_invalid_sampling_parameters_are_refused_by_name(bad, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**bad)


def test_prompt_beyond_the_context_length_is_refused(make_engine):
    engine = make_engine(max_model_len=64)
    with pytest.raises(ValueError, match="context length is 64"):
        engine.add_request("long", list(range(1000, 1064)), GREEDY)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.add_request("oov", [10**7], GREEDY)
    with pytest.raises(ValueError, match="at least one token"):
        engine.add_request("empty", [], GREEDY)
    with pytest.raises(ValueError, match="integer token ids"):
        engine.add_request("floats", [1000.0, 1001.5], GREEDY)
    with pytest.raises(ValueError, match="integer token ids"):
        engine.add_request("nested", [[1000, 1001]], GREEDY)


def test_a_context_past_the_trained_one_needs_allow_long_context(make_engine):
    trained = 40960  # zllm-demo's max_position_embeddings
    with pytest.raises(ValueError, match=f"exceeds the model's trained context of {trained} tokens; "
                                         "pass --allow-long-context"):
        make_engine(max_model_len=trained + 1)
    assert make_engine(max_model_len=trained + 1, allow_long_context=True).max_model_len == trained + 1
    assert make_engine().max_model_len == trained


def test_a_context_past_the_trained_one_is_refused_before_any_weight_loads(tmp_path):
    """A directory with the demo's config and no weights at all: the refusal comes first."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(ValueError, match="exceeds the model's trained context of 40960 tokens"):
        LLMEngine.from_config(EngineConfig(model=str(tmp_path), max_model_len=40961))


def test_a_uint32_array_prompt_runs_like_the_same_list_and_hooks_see_every_token(make_engine):
    prompt = random_prompts(1, 30, 31, seed=7)[0]
    seen = []
    params = SamplingParams(max_tokens=6, temperature=0.0,
                            logits_hook=lambda tokens, row: seen.append(tokens.tolist()))
    (out,) = run_all(make_engine(), [np.array(prompt, dtype=np.uint32)], params)
    assert out == run_all(make_engine(), [prompt], SamplingParams(max_tokens=6, temperature=0.0))[0]
    assert seen == [prompt + out[:i] for i in range(len(out))]


def test_a_next_turn_is_compared_once_and_its_new_ids_still_validated(make_engine, monkeypatch):
    """The prompt is compared with the conversation's last state at admission; the match reuses
    that (no second 1.2 MB compare at 300K tokens) and only the ids after it are validated, so an
    out-of-vocabulary id in the new part is still refused."""
    from zllm_core.cache import prefix_cache
    from zllm_core.cache.scope import CacheHint
    engine, hint = make_engine(), CacheHint(cache_id="conv")
    prompt = np.array(random_prompts(1, 40, 41, seed=3)[0], dtype=np.uint32)
    prompt.flags.writeable = False
    (out,) = run_all(engine, [prompt], SamplingParams(max_tokens=3, temperature=0.0), cache=hint)
    nxt = np.concatenate([prompt, np.array(out + [1234, 2345], dtype=np.uint32)])
    bad = nxt.copy()
    bad[-1] = engine.model.config.vocab_size
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.add_request("bad", bad, GREEDY, hint)
    compares, real = [], prefix_cache.common_prefix
    monkeypatch.setattr(prefix_cache, "common_prefix", lambda *a: compares.append(a) or real(*a))
    engine.add_request("next", nxt, GREEDY, hint)  # PrefixCache.verify: the one compare
    engine.step()
    assert len(compares) == 1 and engine.metrics()["cache"]["cached_tokens"] == 32
    engine.abort("next")
