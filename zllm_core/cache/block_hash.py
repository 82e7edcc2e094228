"""Chained block keys: key_i = H(key_{i-1} || scope || tokens of block i).

Chaining carries position and history at once: a block is found only when the scope,
every earlier block and its own tokens are identical.
"""
from __future__ import annotations

from zllm_core import _native
from zllm_core.cache.token_ids import TokenIds, token_array

HASH_ALGOS = ("sha256", "fast128")


def chain_keys(tokens: TokenIds, block_size: int, scope: bytes, parent: bytes = b"",
               algo: str = "sha256") -> list[bytes]:
    """Keys of every full block of ``tokens``, continuing the chain after ``parent``."""
    return _native.block_hashes(token_array(tokens), block_size, parent, scope, algo)
