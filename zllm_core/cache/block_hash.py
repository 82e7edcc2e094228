"""Chained block keys: key_i = H(key_{i-1} || scope || tokens of block i).

Chaining carries position and history at once: a block is found only when the scope,
every earlier block and its own tokens are identical.
"""
from __future__ import annotations

import itertools
from typing import Iterator, Optional, Sequence

from zllm_core import _native
from zllm_core.cache.token_ids import TokenIds, token_array

HASH_ALGOS = ("sha256", "fast128")


def chain_keys(tokens: TokenIds, block_size: int, scope: bytes, parent: bytes = b"",
               algo: str = "sha256") -> list[bytes]:
    """Keys of every full block of ``tokens``, continuing the chain after ``parent``."""
    return _native.block_hashes(token_array(tokens), block_size, parent, scope, algo)


class KeyChain:
    """The chain keys of a request's or a terminal session's leading full blocks: a prefix of
    an earlier chain's keys, shared rather than copied (a 300K-token context has 19K of them,
    and copying their references, then freeing them, cost more than the rest of a match),
    then the keys computed after it. Chains stay one level deep: one made from another
    shares that one's base and copies its (short) added part."""

    __slots__ = ("_base", "_num_base", "_own")

    def __init__(self, base: Sequence[bytes] = (), num_base: Optional[int] = None):
        n = len(base) if num_base is None else min(num_base, len(base))
        if isinstance(base, KeyChain):
            self._base, self._num_base = base._base, min(n, base._num_base)
            self._own = base._own[:n - self._num_base]
        else:
            self._base, self._num_base, self._own = base, n, []

    def __len__(self) -> int:
        return self._num_base + len(self._own)

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, _ = key.indices(len(self))
            nb = self._num_base
            if stop <= nb:
                return list(self._base[start:stop])
            return list(self._base[start:nb]) + self._own[max(start - nb, 0):stop - nb]
        i = key + len(self) if key < 0 else key
        return self._base[i] if i < self._num_base else self._own[i - self._num_base]

    def __iter__(self) -> Iterator[bytes]:
        return itertools.chain(itertools.islice(self._base, self._num_base), self._own)

    def __iadd__(self, more: Sequence[bytes]) -> "KeyChain":
        self._own += more
        return self

    def prefix(self, n: int) -> "KeyChain":
        """The first ``n`` keys, sharing this chain's base."""
        return KeyChain(self, n)

    def settled(self) -> "KeyChain":
        """This chain, to be kept: as it is, or over one new tuple once the keys added after its
        base outgrow an eighth of it, so a long conversation's copies stay amortised."""
        if len(self._own) <= max(64, self._num_base // 8):
            return self
        return KeyChain(tuple(self))
