"""Shared drivers for engine tests: run requests to completion, recompute logits from scratch."""
import random

import torch

from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.scheduler import Batch, Chunk, TaskKind
from zllm_core.engine.sequence import Sequence
from zllm_core.engine.step_inputs import InputBuffers
from zllm_core.model.attention_backend import ForwardContext

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


def random_prompts(n, lo=5, hi=70, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(1000, 150000) for _ in range(rng.randrange(lo, hi))] for _ in range(n)]


def run_all(engine, prompts, params=GREEDY, **kw):
    ids = [f"q{i}-{id(p)}" for i, p in enumerate(prompts)]
    for rid, p in zip(ids, prompts):
        engine.add_request(rid, p, params, **kw)
    out = {rid: [] for rid in ids}
    while engine.has_unfinished():
        for o in engine.step():
            out[o.request_id] += o.new_token_ids
    return [out[rid] for rid in ids]


def full_recompute_logits(engine, tokens):
    """All-position logits of ``tokens`` from one prefill in a fresh set of blocks."""
    pool = engine.kv.pool
    seq = Sequence("full", tokens, GREEDY, arrival=0)
    seq.block_table = pool.allocate(-(-len(tokens) // pool.block_size))
    try:
        buffers = InputBuffers(1, len(seq.block_table), len(tokens), pool.block_size, engine.device)
        step = buffers.prepare(Batch([Chunk(seq, 0, len(tokens), TaskKind.NEW_PREFILL)], num_decodes=0))
        ctx = ForwardContext(step.meta, engine.runner.storage.kv_caches, engine.runner.backend)
        with torch.inference_mode():
            return engine.model.compute_logits(engine.model(step.input_ids, step.positions, ctx))
    finally:
        pool.free(seq.block_table)


def recording(params):
    seen = []
    params.logits_hook = lambda tokens, row: seen.append(row.clone())
    return seen
