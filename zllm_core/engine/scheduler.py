"""Continuous batching: which tokens of which requests run in the next model step.

A sequence's uncomputed tokens are ``token_ids[num_computed:]``; a step runs a chunk of
them and, when the chunk reaches the end, samples the next token.  Decoding is the case
of exactly one uncomputed token, so the three task kinds fall out of one rule:

* NewPrefill: the first chunk of a sequence that holds no K/V yet;
* AppendPrefill: a chunk continuing K/V the sequence already holds (a later chunk of a
  long prompt, or a prompt whose prefix was adopted from the cache);
* DecodeRound: one token for every decoding sequence, batched.

Prefill steps and decode rounds alternate while both have work, so neither starves.
When blocks run out, the scheduler first evicts unused prefix-cache blocks (those only
the cache holds), then preempts the youngest running sequence; a preempted sequence
keeps its tokens and is recomputed when it is admitted again.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Optional

import numpy as np

from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.prefix_cache import PrefixCache
from zllm_core.engine.sequence import Sequence, Status


class TaskKind(Enum):
    NEW_PREFILL = "new_prefill"
    APPEND_PREFILL = "append_prefill"
    DECODE = "decode"


@dataclass(frozen=True)
class Chunk:
    seq: Sequence
    start: int
    length: int
    kind: TaskKind

    @property
    def samples(self) -> bool:
        """Whether this chunk ends at the sequence's last token, so the step samples after it."""
        return self.start + self.length == self.seq.num_tokens


@dataclass(frozen=True)
class Batch:
    chunks: list[Chunk]

    @property
    def is_decode(self) -> bool:
        return self.chunks[0].kind is TaskKind.DECODE

    @property
    def num_tokens(self) -> int:
        return sum(c.length for c in self.chunks)


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048


class Scheduler:
    def __init__(self, pool: BlockPool, config: SchedulerConfig, cache: Optional[PrefixCache] = None):
        self.pool = pool
        self.config = config
        self.cache = cache
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self._last_was_prefill = False

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> Optional[Batch]:
        while True:
            batch = self._pick()
            if batch or not self.running:
                return batch
            # Running prefills hold every block and none can advance: recompute the youngest.
            self._preempt_youngest()

    def _pick(self) -> Optional[Batch]:
        decoding = [s for s in self.running if s.num_uncomputed == 1]
        prefill_pending = bool(self.waiting) or len(decoding) < len(self.running)
        if decoding and (self._last_was_prefill or not prefill_pending):
            batch = self._schedule_decode(decoding)
            if batch:
                self._last_was_prefill = False
                return batch
        batch = self._schedule_prefill()
        if batch:
            self._last_was_prefill = True
            return batch
        decoding = [s for s in self.running if s.num_uncomputed == 1]
        return self._schedule_decode(decoding) if decoding else None

    def finish(self, seq: Sequence, reason: str) -> None:
        """End a sequence wherever it is (running, waiting) and free every block it holds.

        A sequence that ends normally leaves its terminal state to the cache."""
        self._release(seq, keep_terminal=reason != "abort")
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.status = Status.FINISHED
        seq.finish_reason = reason

    # -- blocks -----------------------------------------------------------------------

    def _release(self, seq: Sequence, keep_terminal: bool = False) -> None:
        table = np.asarray(seq.block_table, dtype=np.intp)  # converted once for pool and cache
        self.pool.free(table)
        if self.cache is not None and seq.cache is not None:
            self.cache.release(seq.request_id, table, seq.token_ids if keep_terminal else None)
        seq.block_table = []
        seq.num_computed = 0

    def _ensure_free(self, n: int) -> bool:
        """Evict reclaimable cache blocks before anything is refused or preempted."""
        short = n - self.pool.num_free
        if short > 0 and self.cache is not None:
            self.cache.evict(short)
        return self.pool.num_free >= n

    def _grow(self, seq: Sequence, upto: int, reserve: int = 0) -> bool:
        """Give ``seq`` blocks up to token ``upto``, leaving ``reserve`` blocks free after."""
        need = seq.blocks_needed(upto, self.pool.block_size)
        if need and not self._ensure_free(need + reserve):
            return False
        seq.block_table += self.pool.allocate(need)
        return True

    def _preempt_youngest(self) -> Sequence:
        victim = max(self.running, key=lambda s: s.arrival)
        self.running.remove(victim)
        self._release(victim)
        victim.status = Status.WAITING
        # Back into the queue in arrival order, so it is readmitted before younger work.
        idx = next((i for i, s in enumerate(self.waiting) if s.arrival > victim.arrival), len(self.waiting))
        self.waiting.insert(idx, victim)
        self.num_preemptions += 1
        return victim

    # -- steps ------------------------------------------------------------------------

    def _schedule_decode(self, decoding: list[Sequence]) -> Optional[Batch]:
        chosen: list[Sequence] = []
        for seq in sorted(decoding, key=lambda s: s.arrival):
            if seq.status is not Status.RUNNING:
                continue  # preempted to make room for an older sequence in this round
            while not self._grow(seq, seq.num_tokens):
                victim = self._preempt_youngest()
                if victim in chosen:
                    chosen.remove(victim)
                if victim is seq:
                    break
            if seq.status is Status.RUNNING:
                chosen.append(seq)
        if not chosen:
            return None
        return Batch([Chunk(s, s.num_computed, 1, TaskKind.DECODE) for s in chosen])

    def _schedule_prefill(self) -> Optional[Batch]:
        budget = self.config.max_num_batched_tokens
        chunks: list[Chunk] = []
        for seq in sorted((s for s in self.running if s.num_uncomputed > 1), key=lambda s: s.arrival):
            chunk = self._prefill_chunk(seq, budget)
            if chunk is None:
                break
            chunks.append(chunk)
            budget -= chunk.length
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            chunk = self._prefill_chunk(seq, budget)
            if chunk is None:
                break  # strictly FIFO: a large head-of-line prompt is not overtaken
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)
            chunks.append(chunk)
            budget -= chunk.length
        return Batch(chunks) if chunks else None

    def _prefill_chunk(self, seq: Sequence, budget: int) -> Optional[Chunk]:
        if budget <= 0:
            return None
        # Admitting new work keeps one block per decoding sequence free, so the next
        # decode round grows without preempting what was just admitted.
        reserve = sum(s.num_uncomputed == 1 for s in self.running) if seq.status is Status.WAITING else 0
        if not seq.block_table and self.cache is not None and seq.cache is not None:
            # What running sequences hold is not reclaimable; everything else is (free, or
            # unused cache blocks the cache evicts, backing them up, before it admits).
            room = self.pool.num_blocks - sum(len(s.block_table) for s in self.running) - reserve
            hit = self.cache.match(seq.request_id, seq.token_ids, seq.cache, count=not seq.matched, room=room)
            seq.block_table = hit.blocks
            seq.num_computed = hit.num_tokens
            if not seq.matched:  # what the client is told was cached: its first admission
                seq.num_cached = hit.num_tokens
                seq.matched = True
        length = min(seq.num_uncomputed, budget)
        if not self._grow(seq, seq.num_computed + length, reserve):
            if seq.status is Status.WAITING:
                self._release(seq)  # not admitted: hold nothing while waiting
            return None
        kind = TaskKind.APPEND_PREFILL if seq.num_computed else TaskKind.NEW_PREFILL
        return Chunk(seq, seq.num_computed, length, kind)
