"""Per tokenizer, once: every token's bytes laid out for a DFA to run over the whole
vocabulary from one state, and a row of allowed tokens computed from a state in native code
(csrc/fence_walk.cpp) in one of two ways:

- a byte trie of the tokens, in preorder: a byte that kills the walk skips every token
  below it, so a structural state costs about its living nodes, not the vocabulary;
- from a loop state (inside a string or free text), the precomputed row of the tokens made
  only of bytes and characters that return to the state, and a walk of the few others.

The byte layout is cached on disk by a hash of the vocabulary and validated when read back;
the trie is built from it at load (natively, tens of milliseconds).
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from zllm_core import _native
from zllm_core.fence.automaton import Dfa
from zllm_core.fence.bitmask import pack_allowed

NO_LIMIT = np.iinfo(np.int32).max  # a row's limit when the output budget does not bind
_NO_ROW = np.zeros(0, dtype=np.int32)
log = logging.getLogger("zllm.fence")


@dataclass(frozen=True)
class Trie:
    """Node i (preorder, 0 the root) is reached by `byte[i]`, lies `depth[i]` bytes down, its
    subtree ends before node `end[i]`, and `ids[ids_start[i]:ids_start[i + 1]]` spell its path."""

    byte: np.ndarray       # uint8 [nodes]
    depth: np.ndarray      # uint16 [nodes]
    end: np.ndarray        # int32 [nodes]
    ids_start: np.ndarray  # int32 [nodes + 1]
    ids: np.ndarray        # int32


@dataclass(frozen=True)
class Row:
    """One state's packed row (fence/bitmask.py's layout), and the fewest bytes any living
    token leaves to acceptance (-1: no token lives), the tightest budget one fits."""

    words: np.ndarray
    closest: int


@dataclass(frozen=True)
class VocabIndex:
    order: np.ndarray       # int32 [n]: the walked token ids
    flat: np.ndarray        # uint8: their bytes, concatenated in `order`
    offsets: np.ndarray     # int64 [n + 1]: token k's bytes are flat[offsets[k]:offsets[k + 1]]
    vocab_size: int         # ids at or past this are never allowed (padding rows of the head)
    token_bytes: tuple[bytes, ...]
    trie: Trie = field(init=False, compare=False, repr=False)  # built at load: ~50 ms, never stale
    _loops: dict = field(default_factory=dict, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def __post_init__(self) -> None:
        trie = _native.fence_trie(self.flat, self.offsets, self.order, self.vocab_size)  # checks the layout
        object.__setattr__(self, "trie", Trie(*trie))

    @classmethod
    def build(cls, token_bytes: Sequence[bytes], excluded: Sequence[int] = ()) -> "VocabIndex":
        """`excluded` ids (terminators, empty slots) never take part in a byte walk."""
        drop = set(excluded) | {i for i, t in enumerate(token_bytes) if not t}
        order = np.array([i for i in range(len(token_bytes)) if i not in drop], dtype=np.int32)
        lengths = np.array([len(token_bytes[i]) for i in order], dtype=np.int64)
        flat = np.frombuffer(b"".join(token_bytes[i] for i in order), dtype=np.uint8).copy()
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return cls(order, flat, offsets, len(token_bytes), tuple(token_bytes))

    @classmethod
    def cached(cls, token_bytes: Sequence[bytes], excluded: Sequence[int] = (),
               cache_dir: str | os.PathLike | None = None) -> "VocabIndex":
        digest = hashlib.sha256(b"\0".join(token_bytes) + repr(sorted(excluded)).encode()).hexdigest()[:16]
        root = Path(cache_dir or os.environ.get("ZLLM_CACHE_DIR") or Path.home() / ".cache" / "zllm") / "fence"
        path = root / f"vocab-{digest}.npz"
        if path.is_file():
            try:
                with np.load(path) as z:
                    return cls(z["order"], z["flat"], z["offsets"], int(z["vocab_size"]), tuple(token_bytes))
            except (OSError, ValueError, KeyError, TypeError):
                pass  # a damaged cache file is rebuilt below
        index = cls.build(token_bytes, excluded)
        try:
            index._save(root, path)
        except OSError as exc:  # a read-only cache only costs the next start a rebuild
            log.warning("cannot cache the fence's vocabulary layout at %s: %s", path, exc)
        return index

    def _save(self, root: Path, path: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".vocab.", suffix=".npz", dir=root)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, order=self.order, flat=self.flat, offsets=self.offsets,
                         vocab_size=np.int64(self.vocab_size))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def row(self, dfa: Dfa, state: int, limit: int, loop: tuple[bytes, bool] | None = None) -> Row:
        """The tokens that live from `state` with at most `limit` bytes left to acceptance.
        `loop` (the ASCII bytes that return to `state`, as 128 flags, and whether every whole
        multi-byte character does) says the state loops: the tokens made of those units are
        taken at once and only the others walked. The result is the same either way."""
        looping, trie = (_NO_ROW, self.trie) if loop is None else self.loop(*loop)
        words, closest = _native.fence_row(dfa.table, dfa.classes, dfa.distance, state, limit, trie.byte,
                                           trie.depth, trie.end, trie.ids_start, trie.ids, self.vocab_size, looping)
        return Row(words, int(closest))

    def loop(self, ascii_loop: bytes, utf8: bool) -> tuple[np.ndarray, Trie]:
        """(the packed row of the tokens made only of these units, the trie of the others),
        computed once per unit set: grammars share them (every JSON string has the same)."""
        key = (ascii_loop, utf8)
        with self._lock:
            found = self._loops.get(key)
        if found is None:
            flags = np.frombuffer(ascii_loop, dtype=np.uint8)
            looping = _native.fence_loop_tokens(self.flat, self.offsets, self.order, flags, utf8).astype(bool)
            allowed = np.zeros(self.vocab_size, dtype=bool)
            allowed[self.order[looping]] = True
            others = np.zeros(self.vocab_size, dtype=np.uint8)
            others[self.order[~looping]] = 1
            t = self.trie
            found = (pack_allowed(allowed), Trie(*_native.fence_subtrie(t.byte, t.depth, t.end, t.ids_start, t.ids, others)))
            with self._lock:
                self._loops[key] = found
        return found
