"""Continuous batching: which tokens of which requests run in the next model step.

A sequence's uncomputed tokens are ``token_ids[num_computed:]``; a step runs a chunk of
them and, when the chunk reaches the end, samples the next token.  Decoding is the case
of exactly one uncomputed token, so the three task kinds fall out of one rule:

* DecodeRound: one token for every decoding sequence;
* AppendPrefill: a chunk continuing K/V the sequence already holds (a later chunk of a
  long prompt, or a prompt whose prefix was adopted from the cache);
* NewPrefill: the first chunk of a sequence that holds no K/V yet.

Every step has one token budget (``max_num_batched_tokens``).  Decodes take it first, so
a long prompt being prefilled never stalls the streams already decoding; prefill chunks
fill the rest, running prompts before new admissions, in arrival order.  When blocks run
out, the cache manager evicts unused prefix-cache blocks, then the scheduler preempts the
youngest running sequence; a preempted sequence keeps its tokens and is recomputed when
it is admitted again.  The scheduler reaches blocks only through the manager.
"""
from __future__ import annotations

from bisect import insort
from collections import deque
from dataclasses import dataclass
from enum import Enum
from operator import attrgetter
from typing import NamedTuple, Optional

from zllm_core.cache.block_table import BlockTable
from zllm_core.cache.kv_cache_manager import KVCacheManager
from zllm_core.engine.sequence import Sequence, Status

_arrival = attrgetter("arrival")


class TaskKind(Enum):
    NEW_PREFILL = "new_prefill"
    APPEND_PREFILL = "append_prefill"
    DECODE = "decode"


class Chunk(NamedTuple):
    """A tuple, not a frozen dataclass: a decode round builds one per running sequence every
    step, and a tuple is built several times faster."""

    seq: Sequence
    start: int
    length: int
    kind: TaskKind
    draft: int = 0  # proposed tokens at the end of the chunk, verified by this step

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the sequence's last token, so the step samples after it."""
        return self.start + self.length - self.draft == self.seq.num_tokens

    @property
    def num_logits(self) -> int:
        """Positions whose logits the step needs: the last token's and each draft token's."""
        return 1 + self.draft if self.samples else 0


@dataclass(frozen=True)
class Batch:
    chunks: list[Chunk]  # one-token decodes first, then drafted decodes and prefill chunks
    num_decodes: int  # the one-token decodes
    # Requests whose block tables were let go since the last batch (finished, aborted,
    # preempted): whoever mirrors tables drops them before reading this batch's.
    released: tuple[str, ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(c.length for c in self.chunks)


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    # Prefill tokens a step may carry beside decodes (None: what the budget leaves). A long
    # prompt then prefills in small chunks while streams decode, each step staying close to a
    # decode step, and at the full budget once they are done: decoders' inter-token latency
    # bought with that prompt's time to first token.
    max_prefill_tokens_while_decoding: Optional[int] = None

    def __post_init__(self) -> None:
        if self.max_prefill_tokens_while_decoding is not None and self.max_prefill_tokens_while_decoding < 1:
            raise ValueError("max_prefill_tokens_while_decoding must be at least 1 (or None: no cap)")


class Scheduler:
    def __init__(self, kv: KVCacheManager, config: SchedulerConfig):
        self.kv = kv
        self.config = config
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in arrival order: the oldest decode first, the youngest preempted
        self.num_preemptions = 0
        self._released: list[str] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self) -> Optional[Batch]:
        while True:
            budget = self.config.max_num_batched_tokens
            plain, drafted = self._decodes(budget)
            room = budget - len(plain) - sum(c.length for c in drafted)
            if (plain or drafted) and self.config.max_prefill_tokens_while_decoding is not None:
                room = min(room, self.config.max_prefill_tokens_while_decoding)
            chunks = plain + drafted + self._prefills(room)
            if chunks or not self.running:
                break
            # Running prefills hold every block and none can advance: recompute the youngest.
            self._preempt_youngest()
        if not chunks:
            return None  # what was released waits for the next batch, whose reader drops it
        released, self._released = tuple(self._released), []
        return Batch(chunks, len(plain), released)

    def update(self, batch: Batch) -> None:
        """The step ran and its tokens are appended: the chunks' K/V are in place, and completed
        blocks join the cache. A drafted chunk computed its last token and the draft; what
        the model accepted is now the sequence's tokens, and the slots of what it rejected
        are simply written again later."""
        bs = self.kv.block_size
        for chunk in batch.chunks:
            seq = chunk.seq
            before = seq.num_computed
            seq.num_computed = seq.num_tokens - 1 if chunk.draft else before + chunk.length
            # Only full blocks are committed, and every earlier chunk's were: a chunk that
            # completes no block (15 decodes in 16) has nothing to commit.
            if seq.cache is not None and seq.num_computed // bs > before // bs:
                self.kv.commit(seq.request_id, seq.token_ids, seq.block_table, seq.num_computed)

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
        if seq.block_table:
            self._released.append(seq.request_id)
        self.kv.release(seq.request_id, seq.block_table, seq.token_ids if keep_terminal else None)
        seq.block_table = BlockTable()
        seq.num_computed = 0

    def _preempt_youngest(self) -> Sequence:
        victim = self.running.pop()
        self._release(victim)
        victim.status = Status.WAITING
        # Back into the queue in arrival order, so it is readmitted before younger work.
        idx = next((i for i, s in enumerate(self.waiting) if s.arrival > victim.arrival), len(self.waiting))
        self.waiting.insert(idx, victim)
        self.num_preemptions += 1
        return victim

    # -- chunks -----------------------------------------------------------------------

    def _decodes(self, budget: int) -> tuple[list[Chunk], list[Chunk]]:
        """One token for each decoding sequence, oldest first, preempting the youngest for blocks;
        then, in what budget and free blocks are left, the drafts proposed after them.  Returns
        the one-token chunks and the drafted ones.  (It runs over every running sequence every
        step: plain attributes, no properties, no sort.)"""
        chosen: list[Sequence] = []
        bs = self.kv.block_size
        for seq in [s for s in self.running if s.num_tokens - s.num_computed == 1][:budget]:
            if seq.status is not Status.RUNNING:
                continue  # preempted to make room for an older sequence in this round
            # A new block every block_size tokens; the manager is asked only then.
            while seq.num_tokens > len(seq.block_table) * bs and not self.kv.grow(seq.block_table, seq.num_tokens):
                victim = self._preempt_youngest()
                if victim in chosen:
                    chosen.remove(victim)
                if victim is seq:
                    break
            if seq.status is Status.RUNNING:
                chosen.append(seq)
        spare = budget - len(chosen)
        plain, drafted = [], []
        for seq in chosen:
            # A draft is optional: one that does not fit is dropped, never a reason to preempt.
            draft = min(seq.num_draft, spare)
            if draft and not self.kv.grow(seq.block_table, seq.num_tokens + draft):
                draft = 0
            spare -= draft
            (drafted if draft else plain).append(Chunk(seq, seq.num_computed, 1 + draft, TaskKind.DECODE, draft))
        return plain, drafted

    def _prefills(self, budget: int) -> list[Chunk]:
        chunks: list[Chunk] = []
        for seq in [s for s in self.running if s.num_tokens - s.num_computed > 1]:
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
            insort(self.running, seq, key=_arrival)
            chunks.append(chunk)
            budget -= chunk.length
        return chunks

    def _prefill_chunk(self, seq: Sequence, budget: int) -> Optional[Chunk]:
        if budget <= 0:
            return None
        # Admitting new work keeps one block per decoding sequence free, so the next
        # decode round grows without preempting what was just admitted.
        reserve = sum(s.num_uncomputed == 1 for s in self.running) if seq.status is Status.WAITING else 0
        if not seq.block_table:
            # What running sequences hold is not reclaimable; everything else is (free, or
            # unused cache blocks the cache evicts, backing them up, before it admits).
            room = self.kv.num_blocks - sum(len(s.block_table) for s in self.running) - reserve
            hit = self.kv.match(seq.request_id, seq.token_ids, seq.cache, first=not seq.matched, room=room)
            # Room for the prompt's uncached blocks and the first outputs' (the table doubles after).
            uncached = -(-seq.num_tokens // self.kv.block_size) - len(hit.blocks)
            seq.block_table = BlockTable(hit.blocks, room=uncached + 16)
            seq.num_computed = hit.num_tokens
            if not seq.matched:  # what the client is told was cached: its first admission
                seq.num_cached = hit.num_tokens
                seq.matched = True
        length = min(seq.num_uncomputed, budget)
        if not self.kv.grow(seq.block_table, seq.num_computed + length, reserve):
            if seq.status is Status.WAITING:
                self._release(seq)  # not admitted: hold nothing while waiting
            return None
        kind = TaskKind.APPEND_PREFILL if seq.num_computed else TaskKind.NEW_PREFILL
        return Chunk(seq, seq.num_computed, length, kind)
