"""The seam between the model and its paged-attention kernels.

Every backend reads K/V from per-layer caches shaped
``[num_blocks, block_size, num_kv_heads, head_dim]`` through int32 ``block_tables``
``[batch, max_blocks]`` and int32 ``seq_lens`` ``[batch]``.  New tokens of a step are
flattened: sequence ``i`` owns query rows ``query_start_loc[i]:query_start_loc[i+1]``,
which are the last positions of its ``seq_lens[i]`` tokens (cached context first,
then the new tokens, which attend causally to each other).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class AttentionMetadata:
    query_start_loc: torch.Tensor  # int32 [batch + 1]
    seq_lens: torch.Tensor  # int32 [batch], context length including this step's tokens
    block_tables: torch.Tensor  # int32 [batch, max_blocks]
    slot_mapping: torch.Tensor  # int64 [num_tokens], flat cache slot of each new token
    max_query_len: int
    max_seq_len: int

    @property
    def is_decode(self) -> bool:
        return self.max_query_len == 1


class AttentionBackend(ABC):
    """Paged attention over a block pool. ``q`` is ``[num_tokens, num_heads, head_dim]``."""

    name: str

    @abstractmethod
    def prefill(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """Variable-length chunks attending to cached blocks and causally to themselves."""

    @abstractmethod
    def decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
               meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """One query token per sequence (``q`` is ``[batch, num_heads, head_dim]``)."""

    def mixed(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
              split: tuple[AttentionMetadata, AttentionMetadata], scale: float) -> torch.Tensor:
        """A step of one-token decodes (leading) and prefill chunks, ``meta`` over all of it and
        ``split`` over each part: by default each part runs the kernel made for it."""
        decodes, prefills = split
        nd = len(decodes.seq_lens)
        return torch.cat((self.decode(q[:nd], k_cache, v_cache, decodes, scale),
                          self.prefill(q[nd:], k_cache, v_cache, prefills, scale)))


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Scatter this step's keys and values (``[num_tokens, kv_heads, head_dim]``) into their slots."""
    flat_k = k_cache.view(-1, *k_cache.shape[2:])
    flat_v = v_cache.view(-1, *v_cache.shape[2:])
    flat_k.index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    flat_v.index_copy_(0, slot_mapping, v.to(v_cache.dtype))


@dataclass
class ForwardContext:
    """What one model step needs besides token ids: where to read and write KV, and how.

    A step that mixes decodes and prefill chunks carries ``split``: the metadata of its
    leading one-token sequences and of the rest, for backends that run each part on the
    kernel made for it (see ``AttentionBackend.mixed``)."""

    meta: AttentionMetadata
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    backend: AttentionBackend
    split: Optional[tuple[AttentionMetadata, AttentionMetadata]] = None

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               scale: float) -> torch.Tensor:
        k_cache, v_cache = self.kv_caches[layer]
        write_kv(k_cache, v_cache, k, v, self.meta.slot_mapping)
        if self.split is not None:
            return self.backend.mixed(q, k_cache, v_cache, self.meta, self.split, scale)
        if self.meta.is_decode:
            return self.backend.decode(q, k_cache, v_cache, self.meta, scale)
        return self.backend.prefill(q, k_cache, v_cache, self.meta, scale)
