"""The on-disk form of a KV snapshot: one blob of whole blocks, each with its own checksum.

    header   magic, version, layout (layers, kv heads, head dim, block size, dtype), scope,
             generation, block count, key length, then an xxh3 of the header itself
    keys     the chained block key of every block, in blob order
    sums     xxh3-64 of every block's bytes, seeded with its key: a block moved to another
             slot, or another chain, fails its check
    data     every block's K and V for all layers, block-major ([L, 2, block_size, heads, dim])

A blob is untrusted input: `read_header` checks everything that sizes an allocation
(version, counts, lengths, layout, scope, the exact file size) before anything else is
read, and `verify` checks a block's bytes before they are copied anywhere. Torch-free, so a
writer process needs only numpy and xxhash.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Sequence

import numpy as np
import xxhash

MAGIC = b"ZKVS"
VERSION = 1
DTYPES = {"float32": (1, 4), "float16": (2, 2), "bfloat16": (3, 2)}  # name -> (code, bytes)
_FIXED = struct.Struct("<4sHHIIIIQII32s")
_HEADER_SUM = struct.Struct("<Q")
MAX_BLOCKS = 1 << 22  # a sanity bound on a count read from disk (64M tokens of 16-token blocks)


class BadSnapshot(ValueError):
    """A blob that fails validation; the caller quarantines it and serves a miss."""


@dataclass(frozen=True)
class BlobLayout:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str  # a key of DTYPES

    @property
    def bytes_per_block(self) -> int:
        return 2 * self.num_layers * self.block_size * self.num_kv_heads * self.head_dim * DTYPES[self.dtype][1]


@dataclass(frozen=True)
class BlobHeader:
    layout: BlobLayout
    scope: bytes
    generation: int
    keys: tuple[bytes, ...]
    sums: np.ndarray  # uint64, one per block

    @property
    def num_blocks(self) -> int:
        return len(self.keys)

    @property
    def data_offset(self) -> int:
        return header_size(self.num_blocks, len(self.keys[0]) if self.keys else 0)

    @property
    def file_size(self) -> int:
        return self.data_offset + self.num_blocks * self.layout.bytes_per_block


def header_size(num_blocks: int, key_len: int) -> int:
    return _FIXED.size + _HEADER_SUM.size + num_blocks * (key_len + 8)


def block_sum(key: bytes, data: memoryview | np.ndarray) -> int:
    return xxhash.xxh3_64_intdigest(data, seed=int.from_bytes(key[:8], "little"))


def encode_header(layout: BlobLayout, scope: bytes, generation: int, keys: Sequence[bytes],
                  data: np.ndarray) -> bytes:
    """The header of a blob whose blocks are the rows of ``data`` (uint8 [n, bytes_per_block])."""
    sums = np.fromiter((block_sum(k, row) for k, row in zip(keys, data)), dtype="<u8", count=len(keys))
    fixed = _FIXED.pack(MAGIC, VERSION, DTYPES[layout.dtype][0], layout.num_layers, layout.num_kv_heads,
                        layout.head_dim, layout.block_size, generation, len(keys),
                        len(keys[0]) if keys else 0, scope)
    body = fixed + b"".join(keys) + sums.tobytes()
    return body[:_FIXED.size] + _HEADER_SUM.pack(xxhash.xxh3_64_intdigest(body)) + body[_FIXED.size:]


def read_header(f: BinaryIO, layout: BlobLayout, scope: bytes, generation: int) -> BlobHeader:
    """Parse and validate a blob's header against what the index and the pool expect."""
    size = os.fstat(f.fileno()).st_size
    fixed = f.read(_FIXED.size + _HEADER_SUM.size)
    if len(fixed) != _FIXED.size + _HEADER_SUM.size:
        raise BadSnapshot("truncated header")
    magic, version, dtype, layers, heads, dim, bs, gen, count, key_len, blob_scope = _FIXED.unpack_from(fixed)
    if magic != MAGIC or version != VERSION:
        raise BadSnapshot(f"not a version-{VERSION} snapshot (magic {magic!r}, version {version})")
    found = BlobLayout(layers, heads, dim, bs, next((n for n, (c, _) in DTYPES.items() if c == dtype), "?"))
    if found != layout:
        raise BadSnapshot(f"layout {found} is not the pool's {layout}")
    if blob_scope != scope or gen != generation:
        raise BadSnapshot("scope or generation differs from the index record")
    if not 0 < count <= MAX_BLOCKS or not 8 <= key_len <= 64:
        raise BadSnapshot(f"implausible counts: {count} blocks, {key_len}-byte keys")
    if size != header_size(count, key_len) + count * layout.bytes_per_block:
        raise BadSnapshot(f"file is {size} bytes, its header describes another size")
    rest = f.read(count * (key_len + 8))
    (stored_sum,) = _HEADER_SUM.unpack_from(fixed, _FIXED.size)
    if len(rest) != count * (key_len + 8) or xxhash.xxh3_64_intdigest(fixed[:_FIXED.size] + rest) != stored_sum:
        raise BadSnapshot("header checksum mismatch")
    keys = tuple(rest[i * key_len:(i + 1) * key_len] for i in range(count))
    sums = np.frombuffer(rest, dtype="<u8", offset=count * key_len)
    return BlobHeader(layout, scope, generation, keys, sums)


def verify(header: BlobHeader, slot: int, data: memoryview | np.ndarray) -> bool:
    return block_sum(header.keys[slot], data) == int(header.sums[slot])
