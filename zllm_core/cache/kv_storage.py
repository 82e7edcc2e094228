"""The KV tensors: per layer K and V caches ``[num_blocks, block_size, num_kv_heads, head_dim]``.

The model runner owns the storage and writes it every step; the SSD tier copies whole
blocks out of it and back.  Which block belongs to whom is the block pool's business.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch


@dataclass(frozen=True)
class KVLayout:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    block_size: int = 16

    @property
    def bytes_per_block(self) -> int:
        """K and V of every layer for one block."""
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.block_size * self.num_kv_heads * self.head_dim * elem

    def blocks_in(self, budget_bytes: int) -> int:
        """How many blocks a byte budget holds; refused when not one."""
        n = budget_bytes // self.bytes_per_block
        if n < 1:
            raise ValueError(f"KV budget of {budget_bytes} bytes holds no block of {self.bytes_per_block} bytes")
        return n


class KVStorage:
    def __init__(self, layout: KVLayout, num_blocks: int, device: torch.device | str = "cpu"):
        self.layout = layout
        self.num_blocks = num_blocks
        shape = (num_blocks, layout.block_size, layout.num_kv_heads, layout.head_dim)
        self.kv_caches = [(torch.zeros(shape, dtype=layout.dtype, device=device),
                           torch.zeros(shape, dtype=layout.dtype, device=device))
                          for _ in range(layout.num_layers)]

    @property
    def allocated_bytes(self) -> int:
        """Bytes the tensors really occupy."""
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv_caches)

    def gather(self, block_ids: Sequence[int]) -> torch.Tensor:
        """K and V of the blocks as one tensor [n, layers, 2, block_size, kv_heads, head_dim]:
        each block's bytes contiguous, the order a snapshot stores them in."""
        host = self._host_views()
        if host is None:
            ids = self._index_tensor(block_ids)
            return torch.stack([torch.stack((k.index_select(0, ids), v.index_select(0, ids)), 1)
                                for k, v in self.kv_caches], 1)
        ids = np.asarray(block_ids, dtype=np.intp)
        out = np.empty((len(ids), len(host), 2, *host[0][0].shape[1:]), dtype=host[0][0].dtype)
        for layer, (k, v) in enumerate(host):
            out[:, layer, 0] = k[ids]
            out[:, layer, 1] = v[ids]
        return torch.from_numpy(out).view(self.layout.dtype)

    def scatter(self, block_ids: Sequence[int], kv: torch.Tensor) -> None:
        """Write ``kv`` (the shape `gather` returns) into the blocks."""
        host = self._host_views()
        if host is None:
            ids = self._index_tensor(block_ids)
            kv = kv.to(self.kv_caches[0][0].device)
            for layer, (k, v) in enumerate(self.kv_caches):
                k.index_copy_(0, ids, kv[:, layer, 0])
                v.index_copy_(0, ids, kv[:, layer, 1])
            return
        ids = np.asarray(block_ids, dtype=np.intp)
        src = kv.view(_same_size_int(kv.dtype)).numpy()
        for layer, (k, v) in enumerate(host):
            k[ids] = src[:, layer, 0]
            v[ids] = src[:, layer, 1]

    def _host_views(self) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """On the CPU, the K/V tensors as numpy integers of the same width: block copies with
        numpy's fancy indexing run ~9x faster than torch's strided index_copy_, and as integers
        every dtype (bfloat16 too) copies bit for bit."""
        if self.kv_caches[0][0].device.type != "cpu":
            return None
        as_int = _same_size_int(self.layout.dtype)
        return [(k.view(as_int).numpy(), v.view(as_int).numpy()) for k, v in self.kv_caches]

    def _index_tensor(self, block_ids: Sequence[int]) -> torch.Tensor:
        return torch.as_tensor(np.asarray(block_ids, dtype=np.int64), device=self.kv_caches[0][0].device)


def _same_size_int(dtype: torch.dtype) -> torch.dtype:
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[torch.empty((), dtype=dtype).element_size()]
