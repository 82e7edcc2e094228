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
        self._synced = np.zeros(max_num_seqs, dtype=np.int64)  # entries of each row filled in
        self._rows: dict[str, int] = {}
        self._free_rows = list(range(max_num_seqs - 1, -1, -1))
        self._ids = np.empty(max_num_tokens, dtype=np.int64)
        self._iota = np.arange(max_num_tokens, dtype=np.int64)

    def prepare(self, batch: Batch) -> StepInputs:
        for request_id in batch.released:
            row = self._rows.pop(request_id, None)
            if row is not None:
                self._free_rows.append(row)
        n = len(batch.chunks)
        rows = np.empty(n, dtype=np.intp)
        starts = np.empty(n, dtype=np.int64)
        lengths = np.empty(n, dtype=np.int64)
        logits = np.empty(n, dtype=np.int64)
        at = 0
        for i, c in enumerate(batch.chunks):
            rows[i] = self._sync(c.seq.request_id, c.seq.block_table)
            starts[i], lengths[i], logits[i] = c.start, c.length, c.num_logits
            self._ids[at:at + c.length] = c.seq.ids(c.start, c.length)
            at += c.length
        ends = np.cumsum(lengths)
        qsl = np.zeros(n + 1, dtype=np.int32)
        qsl[1:] = ends
        seq_lens = (starts + lengths).astype(np.int32)
        # Token t of chunk i sits at position starts[i] + (t - qsl[i]).
        offset = np.repeat(starts - qsl[:-1], lengths)
        positions = self._iota[:at] + offset
        tables = self.tables[rows]
        bs = self.block_size
        slots = tables[np.repeat(np.arange(n), lengths), positions // bs].astype(np.int64) * bs + positions % bs
        to = self._tensor
        meta = self._meta(qsl, seq_lens, tables, to(slots), lengths)
        split = None
        nd = batch.num_decodes
        if 0 < nd < n:
            split = (self._meta(qsl[:nd + 1], seq_lens[:nd], tables[:nd], meta.slot_mapping[:nd], lengths[:nd]),
                     self._meta(qsl[nd:] - qsl[nd], seq_lens[nd:], tables[nd:], meta.slot_mapping[qsl[nd]:],
                                lengths[nd:]))
        # Each chunk's last `logits[i]` positions, in chunk order.
        first = np.repeat(ends - logits - (np.cumsum(logits) - logits), logits)
        sample_rows = first + self._iota[:len(first)]
        return StepInputs(to(self._ids[:at]), to(positions), meta, split, to(sample_rows))

    def _sync(self, request_id: str, table: list[int]) -> int:
        row = self._rows.get(request_id)
        if row is None:
            row = self._rows[request_id] = self._free_rows.pop()
            self._synced[row] = 0
        done = int(self._synced[row])
        if len(table) > done:
            self.tables[row, done:len(table)] = table[done:]
            self._synced[row] = len(table)
        return row

    def _meta(self, qsl: np.ndarray, seq_lens: np.ndarray, tables: np.ndarray, slots: torch.Tensor,
              lengths: np.ndarray) -> AttentionMetadata:
        max_seq_len = int(seq_lens.max())
        width = -(-max_seq_len // self.block_size)
        to = self._tensor
        return AttentionMetadata(query_start_loc=to(qsl), seq_lens=to(seq_lens),
                                 block_tables=to(np.ascontiguousarray(tables[:, :width])), slot_mapping=slots,
                                 max_query_len=int(lengths.max()), max_seq_len=max_seq_len)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)
