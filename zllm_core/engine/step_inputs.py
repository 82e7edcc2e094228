"""One step's model inputs, built in preallocated arrays.

Block tables are mirrored row by row: a request takes a row the first time it runs and
copies in only the blocks added since its last step (one per 16 decoded tokens), so a
300K-token context's 18K-entry table is copied once, not every step.  Positions, slots
and the sampled rows come from the chunk boundaries with vectorised numpy, never token
by token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

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
        self._free_rows = list(range(max_num_seqs - 1, -1, -1))
        self._ids = np.empty(max_num_tokens, dtype=np.int64)
        self._iota = np.arange(max_num_tokens, dtype=np.int64)

    def prepare(self, batch: Batch) -> StepInputs:
        for request_id in batch.released:
            row = self._rows.pop(request_id, None)
            if row is not None:
                self._free_rows.append(row)
        chunks = batch.chunks
        n = len(chunks)
        # One Python pass over the chunks, into one array (a numpy store per field and chunk
        # costs more than the whole conversion).
        sync = self._sync
        rows, starts, lengths, logits, firsts = np.array(
            [(sync(c.seq.request_id, c.seq.block_table), c.start, c.length, c.num_logits, c.seq.token_ids[c.start])
             for c in chunks], dtype=np.int64).T.copy()
        ends = np.cumsum(lengths)
        at = int(ends[-1])
        ids = self._ids
        if at == n:  # one token a chunk (decodes): no per-token arrays to build
            ids[:n] = firsts
            positions = starts
            chunk_of = rows
        else:
            for c, end, length in zip(chunks, ends.tolist(), lengths.tolist()):
                ids[end - length:end] = c.seq.ids(c.start, length)  # a draft's tokens included
            # Token t of chunk i sits at position starts[i] + (t - (ends[i] - lengths[i])).
            positions = self._iota[:at] + np.repeat(starts + lengths - ends, lengths)
            chunk_of = np.repeat(rows, lengths)
        qsl = np.zeros(n + 1, dtype=np.int32)
        qsl[1:] = ends
        seq_lens = (starts + lengths).astype(np.int32)
        bs = self.block_size
        slots = self.tables[chunk_of, positions // bs].astype(np.int64) * bs + positions % bs
        to = self._tensor
        meta = self._meta(qsl, seq_lens, rows, to(slots), lengths)
        split = None
        nd = batch.num_decodes
        if 0 < nd < n:
            split = (self._meta(qsl[:nd + 1], seq_lens[:nd], rows[:nd], meta.slot_mapping[:nd], lengths[:nd]),
                     self._meta(qsl[nd:] - qsl[nd], seq_lens[nd:], rows[nd:], meta.slot_mapping[qsl[nd]:],
                                lengths[nd:]))
        # Each chunk's last `logits[i]` positions (its last token's and its draft's), in chunk order.
        sample_rows = np.repeat(ends - np.cumsum(logits), logits) + self._iota[:int(logits.sum())]
        return StepInputs(to(ids[:at]), to(positions), meta, split, to(sample_rows))

    def _sync(self, request_id: str, table: list[int]) -> int:
        row = self._rows.get(request_id)
        if row is None:
            row = self._rows[request_id] = self._free_rows.pop()
            self._synced[row] = 0
        done = self._synced[row]
        if len(table) > done:
            self.tables[row, done:len(table)] = table[done:]
            self._synced[row] = len(table)
        return row

    def _meta(self, qsl: np.ndarray, seq_lens: np.ndarray, rows: np.ndarray, slots: torch.Tensor,
              lengths: np.ndarray) -> AttentionMetadata:
        max_seq_len = int(seq_lens.max())
        width = -(-max_seq_len // self.block_size)
        to = self._tensor
        return AttentionMetadata(query_start_loc=to(qsl), seq_lens=to(seq_lens),
                                 block_tables=to(self.tables[rows, :width]), slot_mapping=slots,
                                 max_query_len=int(lengths.max()), max_seq_len=max_seq_len)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)
