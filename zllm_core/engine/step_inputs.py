"""One step's model inputs, built in preallocated arrays.

Block tables are mirrored row by row: a request takes a row the first time it runs and
copies in only the blocks added since its last step (one per 16 decoded tokens), so a
300K-token context's 18K-entry table is copied once, not every step.  Rows are kept in
the batch's order (the i-th chunk's request in row i, rows swapped when the order
changes), so the step's block tables are a view of the mirror, not a copy: the order of
running requests rarely changes between steps, and 64 rows of a 32K-token context are
540 KB.  Positions, slots and the sampled rows come from the chunk boundaries with
vectorised numpy, never token by token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from zllm_core.cache.block_table import BlockTable
from zllm_core.engine.scheduler import Batch
from zllm_core.model.attention_backend import AttentionMetadata


@dataclass(frozen=True)
class StepInputs:
    input_ids: torch.Tensor  # int64 [num_tokens]
    positions: torch.Tensor  # int64 [num_tokens]
    meta: AttentionMetadata  # the whole step
    split: Optional[tuple[AttentionMetadata, AttentionMetadata]]  # (decodes, prefills) when mixed
    sample_rows: torch.Tensor  # int64: the query rows whose logits are needed, in chunk order


class InputBuffers:
    def __init__(self, max_num_seqs: int, max_blocks_per_seq: int, max_num_tokens: int,
                 block_size: int, device: torch.device):
        self.block_size = block_size
        self.device = device
        self.tables = np.zeros((max_num_seqs, max_blocks_per_seq), dtype=np.int32)
        self._synced = [0] * max_num_seqs  # entries of each row filled in
        self._rows: dict[str, int] = {}
        self._owners: list[Optional[str]] = [None] * max_num_seqs  # the request in each row
        self._ids = np.empty(max_num_tokens, dtype=np.int64)
        self._iota = np.arange(max_num_tokens + 1, dtype=np.int64)
        self._iota32 = self._iota.astype(np.int32)

    def prepare(self, batch: Batch) -> StepInputs:
        for request_id in batch.released:
            row = self._rows.pop(request_id, None)
            if row is not None:
                self._owners[row] = None
        chunks = batch.chunks
        n = len(chunks)
        bs = self.block_size
        for row, c in enumerate(chunks):
            self._place(row, c.seq.request_id, c.seq.block_table)
        # One Python pass over the chunks, into one array: a numpy call costs more than a
        # Python expression per chunk (several times more when a forward has just evicted
        # numpy's code and data from the caches), so a decode step makes as few as it can.
        starts, lengths, logits, firsts = np.array(
            [(c.start, c.length, c.num_logits, c.seq.token_at(c.start)) for c in chunks], dtype=np.int64).T.copy()
        at = batch.num_tokens
        ids = self._ids
        if at == n:  # one token a chunk (decodes): the chunks' columns are the token arrays
            ids[:n] = firsts
            slots = self.tables[self._iota[:n], starts // bs].astype(np.int64) * bs + starts % bs
            positions, qsl = starts, self._iota32[:n + 1]
            ends = qsl[1:]
        else:
            ends = np.cumsum(lengths)
            for c, end, length in zip(chunks, ends.tolist(), lengths.tolist()):
                ids[end - length:end] = c.seq.ids(c.start, length)  # a draft's tokens included
            # Token t of chunk i sits at position starts[i] + (t - (ends[i] - lengths[i])).
            positions = self._iota[:at] + np.repeat(starts + lengths - ends, lengths)
            slots = self.tables[np.repeat(self._iota[:n], lengths), positions // bs].astype(np.int64) * bs + positions % bs
            qsl = np.zeros(n + 1, dtype=np.int32)
            qsl[1:] = ends
        seq_lens = (starts + lengths).astype(np.int32)
        to = self._tensor
        meta = self._meta(qsl, seq_lens, 0, to(slots), lengths)
        split = None
        nd = batch.num_decodes
        if 0 < nd < n:
            split = (self._meta(qsl[:nd + 1], seq_lens[:nd], 0, meta.slot_mapping[:nd], lengths[:nd]),
                     self._meta(qsl[nd:] - qsl[nd], seq_lens[nd:], nd, meta.slot_mapping[qsl[nd]:], lengths[nd:]))
        # Each chunk's last `logits[i]` positions (its last token's and its draft's), in chunk order.
        num_logits = int(logits.sum())
        sample_rows = (self._iota[:n] if num_logits == n == at else
                       np.repeat(ends - np.cumsum(logits), logits) + self._iota[:num_logits])
        return StepInputs(to(ids[:at]), to(positions), meta, split, to(sample_rows))

    def _place(self, row: int, request_id: str, table: BlockTable) -> None:
        """Put the request's table in ``row`` (moving whatever is there), synced to ``table``."""
        at = self._rows.get(request_id)
        if at is None:  # its first step: a free row, made this one
            at = self._owners.index(None, row) if self._owners[row] is not None else row
            self._rows[request_id], self._owners[at], self._synced[at] = at, request_id, 0
        if at != row:
            self._swap(at, row)
        done, n = self._synced[row], len(table)
        if n > done:
            self.tables[row, done:n] = table[done:]
            self._synced[row] = n

    def _swap(self, a: int, b: int) -> None:
        width = max(self._synced[a], self._synced[b])
        self.tables[[a, b], :width] = self.tables[[b, a], :width]
        owners, synced = self._owners, self._synced
        owners[a], owners[b] = owners[b], owners[a]
        synced[a], synced[b] = synced[b], synced[a]
        for row in (a, b):
            if owners[row] is not None:
                self._rows[owners[row]] = row

    def _meta(self, qsl: np.ndarray, seq_lens: np.ndarray, first_row: int, slots: torch.Tensor,
              lengths: np.ndarray) -> AttentionMetadata:
        """The metadata of the chunks in rows ``first_row:first_row + len(seq_lens)``."""
        max_seq_len = int(seq_lens.max())
        width = -(-max_seq_len // self.block_size)
        to = self._tensor
        tables = self.tables[first_row:first_row + len(seq_lens), :width]  # a view
        return AttentionMetadata(query_start_loc=to(qsl), seq_lens=to(seq_lens), block_tables=to(tables),
                                 slot_mapping=slots,
                                 max_query_len=int(lengths.max()), max_seq_len=max_seq_len)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        return tensor if self.device.type == "cpu" else tensor.to(self.device)
