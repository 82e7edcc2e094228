"""Turns a scheduled batch into one model step: flat inputs, paged metadata, logits."""
from __future__ import annotations

import numpy as np
import torch

from zllm_core.cache.block_pool import BlockPool
from zllm_core.engine.scheduler import Batch
from zllm_core.model.attention_backend import AttentionBackend, AttentionMetadata, ForwardContext
from zllm_core.model.causal_lm import CausalLM


def build_metadata(batch: Batch, block_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
    """Token ids, positions and attention metadata for the chunks of one step."""
    ids: list[np.ndarray] = []
    positions: list[int] = []
    slots: list[int] = []
    starts = [0]
    seq_lens: list[int] = []
    for c in batch.chunks:
        table = c.seq.block_table
        pos = range(c.start, c.start + c.length)
        ids.append(c.seq.token_ids[c.start:c.start + c.length])
        positions += pos
        slots += [table[p // block_size] * block_size + p % block_size for p in pos]
        starts.append(starts[-1] + c.length)
        seq_lens.append(c.start + c.length)
    width = max(len(c.seq.block_table) for c in batch.chunks)
    # Filled row by row in numpy: a 300K-token context's table is 18K ids at every step.
    tables = np.zeros((len(batch.chunks), width), dtype=np.int32)  # padded with block 0
    for row, c in zip(tables, batch.chunks):
        row[:len(c.seq.block_table)] = c.seq.block_table
    meta = AttentionMetadata(
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=torch.from_numpy(tables).to(device),
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        max_query_len=max(c.length for c in batch.chunks),
        max_seq_len=max(seq_lens),
    )
    return (torch.from_numpy(np.concatenate(ids)).to(device=device, dtype=torch.long),
            torch.tensor(positions, dtype=torch.long, device=device), meta)


class ModelRunner:
    def __init__(self, model: CausalLM, pool: BlockPool, backend: AttentionBackend,
                 device: torch.device):
        if device.type == "cpu":
            model.prepack()  # weights in oneDNN's layout (see model/cpu_linear.py); idempotent
        self.model = model
        self.pool = pool
        self.backend = backend
        self.device = device

    def run(self, batch: Batch) -> torch.Tensor:
        """Run the step; return fp32 logits for the chunks that sample, in chunk order."""
        input_ids, positions, meta = build_metadata(batch, self.pool.block_size, self.device)
        ctx = ForwardContext(meta, self.pool.kv_caches, self.backend)
        hidden = self.model(input_ids, positions, ctx)
        ends = meta.query_start_loc[1:].long() - 1
        sampling = torch.tensor([c.samples for c in batch.chunks], device=self.device)
        return self.model.compute_logits(hidden[ends[sampling]])
