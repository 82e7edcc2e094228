"""Per tokenizer, once: every token's bytes laid out for a DFA to run over the whole
vocabulary from one state.

Tokens are concatenated into one byte array with offsets; the walk is native
(csrc/fence_walk.cpp): each token stops at its first dead byte, so in a structural state,
where nearly every token dies at once, the walk costs about a step a token. The layout is
cached on disk by a hash of the vocabulary, so a restart does not rebuild it.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from zllm_core import _native
from zllm_core.fence.automaton import Dfa

FAR = 65535  # distances are kept in 16 bits; FAR marks a token that dies
log = logging.getLogger("zllm.fence")


@dataclass(frozen=True)
class VocabIndex:
    order: np.ndarray       # int32 [n]: the walked token ids
    flat: np.ndarray        # uint8: their bytes, concatenated in `order`
    offsets: np.ndarray     # int64 [n + 1]: token k's bytes are flat[offsets[k]:offsets[k + 1]]
    vocab_size: int         # ids at or past this are never allowed (padding rows of the head)
    token_bytes: tuple[bytes, ...]

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
                    index = cls(z["order"], z["flat"], z["offsets"], int(z["vocab_size"]), tuple(token_bytes))
                if len(index.offsets) == len(index.order) + 1 and index.offsets[-1] == len(index.flat):
                    return index
            except (OSError, ValueError, KeyError):
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

    def remaining(self, dfa: Dfa, state: int) -> np.ndarray:
        """uint16, in `order`: the fewest bytes left to acceptance after each token from `state`
        (at most FAR - 1: budgets that large are not told apart), FAR where a token dies."""
        return _native.fence_walk(dfa.table, dfa.classes, dfa.distance, self.flat, self.offsets, state, FAR)

    def allowed(self, remaining: np.ndarray, max_distance: int) -> np.ndarray:
        """bool [vocab_size]: the tokens whose `remaining` is at most `max_distance` (< FAR)."""
        out = np.zeros(self.vocab_size, dtype=bool)
        out[self.order[remaining <= max_distance]] = True
        return out
