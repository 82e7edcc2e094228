"""Mixed steps: decodes and prefill chunks share one token budget and change no token."""
import numpy as np
from engine_helpers import random_prompts, run_all

from zllm_core.engine.sampling_params import SamplingParams

STREAM = SamplingParams(max_tokens=40, temperature=0.0)


def test_16_greedy_streams_are_identical_whether_a_32k_prefill_joins_midway_or_not(make_engine):
    prompts = random_prompts(16, seed=21)
    alone = run_all(make_engine(), prompts, STREAM)

    engine = make_engine(kv_cache_bytes=256 << 20, max_num_batched_tokens=2048)
    streams = [f"s{i}" for i in range(16)]
    for rid, prompt in zip(streams, prompts):
        engine.add_request(rid, prompt, STREAM)
    out = {rid: [] for rid in streams}
    per_step = []
    while engine.has_unfinished():
        if len(out["s0"]) == 4 and "big" not in out:
            big = np.random.default_rng(0).integers(1000, 150000, 32768)
            engine.add_request("big", big, SamplingParams(max_tokens=2, temperature=0.0))
            out["big"] = []
        step = engine.step()
        if "big" in out and not out["big"]:
            per_step.append(sum(o.request_id != "big" for o in step))
        for o in step:
            out[o.request_id] += o.new_token_ids
    assert [out[rid] for rid in streams] == alone
    # 32,768 tokens at 2,048 a step less the 16 decodes: 17 steps, and in every one of them
    # all 16 streams decoded (the prefill never had a step to itself).
    assert per_step == [16] * 17
