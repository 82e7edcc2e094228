"""Chained block keys: key_i = H(key_{i-1} || scope || tokens of block i).

Chaining carries position and history at once: a block is found only when the scope,
every earlier block and its own tokens are identical.
"""
from __future__ import annotations

from array import array
from typing import Sequence

from zllm_core import _native

HASH_ALGOS = ("sha256", "fast128")


def chain_keys(tokens: Sequence[int], block_size: int, scope: bytes, parent: bytes = b"",
               algo: str = "sha256") -> list[bytes]:
    """Keys of every full block of ``tokens``, continuing the chain after ``parent``."""
    return _native.block_hashes(array("i", tokens), block_size, parent, scope, algo)
