"""Per tokenizer, once: every token's bytes laid out so a DFA can run over the whole vocabulary
at once.

Tokens are sorted by length, longest first, into a padded byte matrix; running a DFA from one
state over all of them is one vectorised gather per byte position, on a shrinking prefix of
the rows (the work is the vocabulary's total length, ~1M bytes for 150K tokens). The matrix is
cached on disk by a hash of the vocabulary, so a restart does not rebuild it.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from zllm_core.fence.automaton import Dfa

FAR = 255  # distances are kept in a byte; FAR marks a token that dies


@dataclass(frozen=True)
class VocabIndex:
    order: np.ndarray       # int32 [n]: token ids by length, longest first
    columns: np.ndarray     # uint8 [max_len, n]: byte j of each, zero-padded (a row per position)
    live: np.ndarray        # int32 [max_len]: how many tokens are longer than each position
    vocab_size: int         # ids at or past this are never allowed (padding rows of the head)
    token_bytes: tuple[bytes, ...]

    @classmethod
    def build(cls, token_bytes: Sequence[bytes], excluded: Sequence[int] = ()) -> "VocabIndex":
        """`excluded` ids (terminators, empty slots) never take part in a byte walk."""
        drop = set(excluded) | {i for i, t in enumerate(token_bytes) if not t}
        ids = np.array([i for i in range(len(token_bytes)) if i not in drop], dtype=np.int64)
        lengths = np.array([len(token_bytes[i]) for i in ids], dtype=np.int64)
        order = ids[np.argsort(-lengths, kind="stable")]
        sorted_lengths = np.sort(lengths)[::-1]
        width = int(sorted_lengths[0]) if len(order) else 0
        columns = np.zeros((width, len(order)), dtype=np.uint8)
        flat = np.frombuffer(b"".join(token_bytes[i] for i in order), dtype=np.uint8)
        rows = np.repeat(np.arange(len(order)), sorted_lengths)
        starts = np.repeat(np.cumsum(sorted_lengths) - sorted_lengths, sorted_lengths)
        columns[np.arange(len(flat)) - starts, rows] = flat
        live = np.searchsorted(-sorted_lengths, -np.arange(width), side="left").astype(np.int32)
        return cls(order.astype(np.int32), columns, live, len(token_bytes), tuple(token_bytes))

    @classmethod
    def cached(cls, token_bytes: Sequence[bytes], excluded: Sequence[int] = (),
               cache_dir: str | os.PathLike | None = None) -> "VocabIndex":
        digest = hashlib.sha256(b"\0".join(token_bytes) + repr(sorted(excluded)).encode()).hexdigest()[:16]
        root = Path(cache_dir or os.environ.get("ZLLM_CACHE_DIR") or Path.home() / ".cache" / "zllm") / "fence"
        path = root / f"vocab-{digest}.npz"
        if path.is_file():
            try:
                with np.load(path) as z:
                    index = cls(z["order"], z["columns"], z["live"], int(z["vocab_size"]), tuple(token_bytes))
                if index.columns.shape == (len(index.live), len(index.order)):
                    return index
            except (OSError, ValueError, KeyError):
                pass  # a damaged cache file is rebuilt below
        index = cls.build(token_bytes, excluded)
        index._save(root, path)
        return index

    def _save(self, root: Path, path: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".vocab.", suffix=".npz", dir=root)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, order=self.order, columns=self.columns, live=self.live,
                         vocab_size=np.int64(self.vocab_size))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def walk(self, dfa: Dfa, state: int) -> np.ndarray:
        """The state each token leads to from `state` (in `order`); `dfa.dead` where it dies."""
        states = np.full(len(self.order), state, dtype=np.int32)
        for j, n in enumerate(self.live):
            states[:n] = dfa.table[states[:n], dfa.classes[self.columns[j, :n]]]
        return states

    def remaining(self, dfa: Dfa, state: int) -> np.ndarray:
        """uint8, in `order`: the fewest bytes left to acceptance after each token from `state`
        (at most FAR - 1: budgets that large are not told apart), FAR where a token dies."""
        ends = self.walk(dfa, state)
        out = np.minimum(dfa.distance[ends], FAR - 1).astype(np.uint8)
        out[ends == dfa.dead] = FAR
        return out

    def allowed(self, remaining: np.ndarray, max_distance: int) -> np.ndarray:
        """bool [vocab_size]: the tokens whose `remaining` is at most `max_distance` (< FAR)."""
        out = np.zeros(self.vocab_size, dtype=bool)
        out[self.order[remaining <= max_distance]] = True
        return out
