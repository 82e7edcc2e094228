"""The runner's step inputs against the scheduler's batches, under churn: block tables are
views of the mirror in batch order and always equal each request's own table."""
import random

import numpy as np
import torch

from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.kv_cache_manager import KVCacheManager
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.scheduler import Scheduler, SchedulerConfig
from zllm_core.engine.sequence import Sequence
from zllm_core.engine.step_inputs import InputBuffers

BS = 4


def check(step, batch, buffers):
    """Every input the model reads, recomputed from the chunks token by token."""
    m = step.meta
    assert np.shares_memory(m.block_tables.numpy(), buffers.tables)  # a view, not a copy
    ids, positions, slots, qsl = [], [], [], [0]
    for i, c in enumerate(batch.chunks):
        table = c.seq.block_table
        assert m.block_tables[i, :len(table)].tolist() == table[:m.block_tables.shape[1]].tolist()
        pos = range(c.start, c.start + c.length)
        ids += c.seq.ids(c.start, c.length).tolist()
        positions += pos
        slots += [table[p // BS] * BS + p % BS for p in pos]
        qsl.append(qsl[-1] + c.length)
    assert step.input_ids.tolist() == ids and step.positions.tolist() == positions
    assert m.slot_mapping.tolist() == slots and m.query_start_loc.tolist() == qsl
    assert m.seq_lens.tolist() == [c.start + c.length for c in batch.chunks]


def test_tables_follow_the_batch_order_through_admissions_finishes_preemptions_and_idle_steps():
    rng = random.Random(5)
    pool = BlockPool(40, BS)
    sched = Scheduler(KVCacheManager(pool), SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=12))
    buffers = InputBuffers(4, 40, 12, BS, torch.device("cpu"))
    arrivals, idle_steps = 0, 0
    for _ in range(400):
        if rng.random() < 0.3:
            n = rng.randrange(1, 30)
            sched.add(Sequence(f"r{arrivals}", list(range(n)), SamplingParams(max_tokens=50), arrival=arrivals))
            arrivals += 1
        live = sched.running + list(sched.waiting)
        # Now and then every request ends at once, and the next step finds nothing to run.
        for seq in live if rng.random() < 0.05 else rng.sample(live, rng.random() < 0.1 and len(live) > 0):
            sched.finish(seq, rng.choice(["stop", "abort"]))
        batch = sched.schedule()
        if batch is None:
            idle_steps += 1
            continue
        check(buffers.prepare(batch), batch, buffers)
        sched.update(batch)
        for c in batch.chunks:
            if c.samples:
                c.seq.append(7)
    assert sched.num_preemptions > 0 and idle_steps > 10 and arrivals > 100
