"""The scheduler on its own: task kinds, budgets, preemption, and block accounting."""
import torch

from zllm_core.cache.block_pool import BlockPool, KVLayout
from zllm_core.cache.prefix_cache import CacheRequest, PrefixCache
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.scheduler import Scheduler, SchedulerConfig, TaskKind
from zllm_core.engine.sequence import Sequence

LAYOUT = KVLayout(num_layers=1, num_kv_heads=1, head_dim=4, dtype=torch.float32, block_size=4)


def make_seq(i: int, n: int) -> Sequence:
    return Sequence(f"r{i}", list(range(n)), SamplingParams(max_tokens=4), arrival=i)


def advance(batch):
    """What the engine does after a step: mark computed, append a token where it samples."""
    for c in batch.chunks:
        c.seq.num_computed += c.length
        if c.samples:
            c.seq.append(0)


def test_long_prompt_is_chunked_new_then_append():
    sched = Scheduler(BlockPool(LAYOUT, 64), SchedulerConfig(max_num_batched_tokens=8))
    seq = make_seq(0, 20)
    sched.add(seq)
    kinds = []
    while seq.num_uncomputed > 1:
        batch = sched.schedule()
        kinds.append([(c.kind, c.length) for c in batch.chunks])
        advance(batch)
    assert kinds == [[(TaskKind.NEW_PREFILL, 8)], [(TaskKind.APPEND_PREFILL, 8)], [(TaskKind.APPEND_PREFILL, 4)]]
    assert seq.num_tokens == 21 and len(seq.block_table) == 5


def test_prefill_and_decode_alternate_while_both_have_work():
    sched = Scheduler(BlockPool(LAYOUT, 64), SchedulerConfig(max_num_batched_tokens=4))
    sched.add(make_seq(0, 3))
    sched.add(make_seq(1, 12))
    kinds = []
    for _ in range(6):
        batch = sched.schedule()
        kinds.append(batch.is_decode)
        advance(batch)
    assert kinds[:4] == [False, True, False, True]


def test_decode_growth_preempts_the_youngest_and_keeps_its_tokens():
    pool = BlockPool(LAYOUT, 4)
    sched = Scheduler(pool, SchedulerConfig())
    old, young = make_seq(0, 8), make_seq(1, 8)
    sched.add(old)
    sched.add(young)
    advance(sched.schedule())  # both prompts fill the pool exactly
    assert pool.num_free == 0
    batch = sched.schedule()  # decoding needs a fifth block
    assert [c.seq for c in batch.chunks] == [old]
    assert young.num_computed == 0 and young.num_tokens == 9 and young in sched.waiting
    assert sched.num_preemptions == 1


def test_unused_cache_blocks_are_evicted_before_anyone_is_preempted():
    pool = BlockPool(LAYOUT, 4)
    cache = PrefixCache(pool)
    scope = b"s" * 32
    donor = make_seq(9, 9)
    cache.match(donor.request_id, donor.token_ids, CacheRequest(scope))
    donor.block_table = pool.allocate(3)
    cache.commit(donor.request_id, donor.token_ids, donor.block_table, 9)
    pool.free(donor.block_table)
    cache.release(donor.request_id, donor.block_table, donor.token_ids)
    assert pool.num_free == 2 and cache.index.num_evictable() == 2

    sched = Scheduler(pool, SchedulerConfig(), cache)
    sched.add(make_seq(0, 16))
    batch = sched.schedule()
    assert batch.num_tokens == 16 and sched.num_preemptions == 0 and cache.index.num_evicted == 2


def test_finish_anywhere_frees_every_block():
    pool = BlockPool(LAYOUT, 16)
    sched = Scheduler(pool, SchedulerConfig(max_num_batched_tokens=6))
    seqs = [make_seq(i, 10) for i in range(3)]
    for s in seqs:
        sched.add(s)
    advance(sched.schedule())
    for s in seqs:
        sched.finish(s, "abort")
    assert pool.is_empty() and not sched.has_work()


def test_admission_keeps_a_block_free_for_each_decoding_sequence():
    pool = BlockPool(LAYOUT, 4)
    sched = Scheduler(pool, SchedulerConfig())
    first = make_seq(0, 3)
    sched.add(first)
    advance(sched.schedule())  # prefill: one block, 4 tokens
    late = make_seq(1, 12)  # would take the last three blocks
    sched.add(late)
    advance(sched.schedule())  # decode round for first: 5 tokens, its next step needs block 2
    batch = sched.schedule()
    assert batch.is_decode and [c.seq for c in batch.chunks] == [first]
    assert late in sched.waiting and not late.block_table and sched.num_preemptions == 0
