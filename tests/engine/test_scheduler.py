"""The scheduler on its own: task kinds, budgets, preemption, and block accounting."""
import numpy as np

from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.kv_cache_manager import KVCacheManager
from zllm_core.cache.prefix_cache import CacheRequest, PrefixCache
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.scheduler import Scheduler, SchedulerConfig, TaskKind
from zllm_core.engine.sequence import Sequence

BS = 4


def make_scheduler(num_blocks: int, cache: bool = False, **config):
    pool = BlockPool(num_blocks, BS)
    kv = KVCacheManager(pool, PrefixCache(pool) if cache else None)
    return Scheduler(kv, SchedulerConfig(**config)), pool


def make_seq(i: int, n: int) -> Sequence:
    return Sequence(f"r{i}", list(range(n)), SamplingParams(max_tokens=4), arrival=i)


def advance(sched, batch):
    """What the engine does after a step: mark computed, append a token where it samples."""
    sched.update(batch)
    for c in batch.chunks:
        if c.samples:
            c.seq.append(0)


def test_long_prompt_is_chunked_new_then_append():
    sched, _ = make_scheduler(64, max_num_batched_tokens=8)
    seq = make_seq(0, 20)
    sched.add(seq)
    kinds = []
    while seq.num_uncomputed > 1:
        batch = sched.schedule()
        kinds.append([(c.kind, c.length) for c in batch.chunks])
        advance(sched, batch)
    assert kinds == [[(TaskKind.NEW_PREFILL, 8)], [(TaskKind.APPEND_PREFILL, 8)], [(TaskKind.APPEND_PREFILL, 4)]]
    assert seq.num_tokens == 21 and len(seq.block_table) == 5


def test_decodes_come_first_and_prefill_chunks_fill_the_rest_of_one_budget():
    sched, _ = make_scheduler(64, max_num_batched_tokens=4)
    short, long = make_seq(0, 3), make_seq(1, 12)
    sched.add(short)
    sched.add(long)
    steps = []
    for _ in range(5):
        batch = sched.schedule()
        steps.append([(c.seq.request_id, c.kind, c.length) for c in batch.chunks])
        assert batch.num_decodes == sum(c.kind is TaskKind.DECODE for c in batch.chunks)
        assert batch.num_tokens <= 4
        advance(sched, batch)
    assert steps[:4] == [
        [("r0", TaskKind.NEW_PREFILL, 3), ("r1", TaskKind.NEW_PREFILL, 1)],
        [("r0", TaskKind.DECODE, 1), ("r1", TaskKind.APPEND_PREFILL, 3)],
        [("r0", TaskKind.DECODE, 1), ("r1", TaskKind.APPEND_PREFILL, 3)],
        [("r0", TaskKind.DECODE, 1), ("r1", TaskKind.APPEND_PREFILL, 3)],
    ]
    assert steps[4] == [("r0", TaskKind.DECODE, 1), ("r1", TaskKind.APPEND_PREFILL, 2)]  # its last chunk samples


def test_prefill_beside_decodes_is_capped_and_takes_the_whole_budget_once_they_end():
    sched, _ = make_scheduler(64, max_num_batched_tokens=8, max_prefill_tokens_while_decoding=2)
    short, long = make_seq(0, 3), make_seq(1, 24)
    sched.add(short)
    steps = []
    while long.num_uncomputed > 1 or not steps:
        if len(steps) == 1:
            sched.add(long)
        batch = sched.schedule()
        steps.append([(c.seq.request_id, c.kind, c.length) for c in batch.chunks])
        advance(sched, batch)
        if short.num_tokens == 6 and short in sched.running:
            sched.finish(short, "length")
    assert steps[0] == [("r0", TaskKind.NEW_PREFILL, 3)]  # nothing decodes yet: the whole budget
    assert steps[1] == [("r0", TaskKind.DECODE, 1), ("r1", TaskKind.NEW_PREFILL, 2)]
    assert steps[2] == [("r0", TaskKind.DECODE, 1), ("r1", TaskKind.APPEND_PREFILL, 2)]
    # The stream ended (6 tokens): the whole budget again.
    assert steps[3:] == [[("r1", TaskKind.APPEND_PREFILL, 8)], [("r1", TaskKind.APPEND_PREFILL, 8)],
                         [("r1", TaskKind.APPEND_PREFILL, 4)]]


def test_decodes_beyond_the_budget_wait_oldest_first():
    sched, _ = make_scheduler(64, max_num_batched_tokens=6)
    for i in range(3):
        sched.add(make_seq(i, 2))
    advance(sched, sched.schedule())  # three prompts in one step; all decode now
    sched.config = SchedulerConfig(max_num_batched_tokens=2)
    batch = sched.schedule()
    assert [c.seq.request_id for c in batch.chunks] == ["r0", "r1"] and batch.num_decodes == 2


def test_decode_growth_preempts_the_youngest_and_keeps_its_tokens():
    sched, pool = make_scheduler(4)
    old, young = make_seq(0, 8), make_seq(1, 8)
    sched.add(old)
    sched.add(young)
    advance(sched, sched.schedule())  # both prompts fill the pool exactly
    assert pool.num_free == 0
    batch = sched.schedule()  # decoding needs a fifth block
    assert [c.seq for c in batch.chunks] == [old]
    assert young.num_computed == 0 and young.num_tokens == 9 and young in sched.waiting
    assert sched.num_preemptions == 1 and batch.released == ("r1",)  # mirrors of its table drop it


def test_unused_cache_blocks_are_evicted_before_anyone_is_preempted():
    sched, pool = make_scheduler(4, cache=True)
    cache = sched.kv.cache
    scope = b"s" * 32
    donor = make_seq(9, 9)
    cache.match(donor.request_id, donor.token_ids, CacheRequest(scope))
    donor.block_table = pool.allocate(3)
    cache.commit(donor.request_id, donor.token_ids, donor.block_table, 9)
    pool.free(donor.block_table)
    cache.release(donor.request_id, donor.block_table, donor.token_ids)
    assert pool.num_free == 2 and len(cache.index) == 2

    sched.add(make_seq(0, 16))
    batch = sched.schedule()
    assert batch.num_tokens == 16 and sched.num_preemptions == 0 and cache.index.num_evicted == 2


def test_finish_anywhere_frees_every_block():
    sched, pool = make_scheduler(16, max_num_batched_tokens=6)
    seqs = [make_seq(i, 10) for i in range(3)]
    for s in seqs:
        sched.add(s)
    advance(sched, sched.schedule())
    for s in seqs:
        sched.finish(s, "abort")
    assert pool.is_empty() and not sched.running and not sched.waiting


def test_admission_keeps_a_block_free_for_each_decoding_sequence():
    sched, pool = make_scheduler(4)
    first = make_seq(0, 3)
    sched.add(first)
    advance(sched, sched.schedule())  # prefill: one block, 4 tokens
    late = make_seq(1, 12)  # would take the last three blocks
    sched.add(late)
    advance(sched, sched.schedule())  # decode round for first: 5 tokens, its next step needs block 2
    batch = sched.schedule()
    assert batch.num_decodes == 1 and [c.seq for c in batch.chunks] == [first]
    assert late in sched.waiting and not late.block_table and sched.num_preemptions == 0


def test_a_read_only_prompt_is_held_not_copied_and_its_session_shares_it():
    """The tokenizer's read-only prompt array goes through admission, the match and the
    finished request's terminal session without a copy; only what was generated is copied."""
    sched, pool = make_scheduler(16, cache=True)
    prompt = np.arange(10, dtype=np.uint32)
    prompt.flags.writeable = False
    seq = Sequence("r0", prompt, SamplingParams(max_tokens=4), arrival=0)
    seq.cache = CacheRequest(b"s" * 32, "conv")
    sched.add(seq)
    advance(sched, sched.schedule())
    assert np.shares_memory(seq.token_ids.head, prompt) and seq.token_ids.tail.tolist() == [0]
    sched.finish(seq, "stop")
    session = sched.kv.cache.sessions.latest(b"s" * 32, "conv")
    assert np.shares_memory(session.tokens.head, prompt) and not np.shares_memory(session.tokens.tail, seq._out)
    assert np.asarray(session.tokens).tolist() == list(range(10)) + [0]
    sched.kv.cache.clear()
    assert pool.is_empty()
