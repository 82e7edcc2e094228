"""Shadow verifier: re-tokenizes a sampled fraction of results with the reference on a
background thread. It exists for bugs a fresh process never sees: those that depend on a
session's history (incremental repair), and those of one device's kernels (the GPU full path,
checked against the CPU path). A mismatch is reported to the owner, who stops trusting that
state (drops the session, turns the device path off), counts, and logs the first differing
position with the text around it."""
from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)


@dataclass
class ShadowStats:
    checked: int = 0
    mismatches: int = 0
    skipped: int = 0  # sampled while the queue was full


@dataclass(frozen=True)
class Mismatch:
    session_id: int
    token_index: int  # first differing token
    char_offset: int  # where that token starts in the text
    context: str      # the text around it


class ShadowVerifier:
    def __init__(self, reference: Callable[[str], Sequence[int]], on_mismatch: Callable[[Mismatch], None],
                 decode: Callable[[Sequence[int]], str], rate: float = 0.05, seed: int | None = None,
                 max_pending: int = 16, label: str = "incremental tokenization"):
        self.rate, self.label = rate, label
        self.stats = ShadowStats()
        self._reference, self._on_mismatch, self._decode = reference, on_mismatch, decode
        self._rng = random.Random(seed)
        self._pending: queue.Queue = queue.Queue(max_pending)
        self._worker: threading.Thread | None = None

    def sample(self, session_id: int, text: str, ids: np.ndarray,
               reference: Callable[[str], Sequence[int]] | None = None) -> None:
        """Queues (text, ids) for checking with probability `rate`; never blocks. `ids` must
        not change afterwards (the incremental tokenizer's views never do). `reference`, if
        given, replaces the verifier's for this sample (a call's own special-token policy)."""
        if self.rate <= 0 or self._rng.random() >= self.rate:
            return
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="tokenizer-shadow", daemon=True)
            self._worker.start()
        try:
            self._pending.put_nowait((session_id, text, ids, reference))
        except queue.Full:
            self.stats.skipped += 1

    def check(self, session_id: int, text: str, ids: np.ndarray,
              reference: Callable[[str], Sequence[int]] | None = None) -> Mismatch | None:
        """Compares ids with the reference now; reports and returns the first difference."""
        expected = np.asarray((reference or self._reference)(text), dtype=np.int64)
        self.stats.checked += 1
        got = ids.astype(np.int64)
        n = min(len(got), len(expected))
        differ = np.flatnonzero(got[:n] != expected[:n])
        if len(differ) == 0 and len(got) == len(expected):
            return None
        k = int(differ[0]) if len(differ) else n
        offset = len(self._decode(expected[:k].tolist()))
        mismatch = Mismatch(session_id, k, offset, text[max(0, offset - 40):offset + 40])
        self.stats.mismatches += 1
        log.error("%s differs from the reference at token %d (char %d): %r",
                  self.label, k, offset, mismatch.context)
        self._on_mismatch(mismatch)
        return mismatch

    def drain(self) -> None:
        """Waits until every queued sample has been checked."""
        self._pending.join()

    def _run(self) -> None:
        while True:
            item = self._pending.get()
            try:
                self.check(*item)
            except Exception:  # a failing check must not kill the verifier
                log.exception("shadow check failed")
            finally:
                self._pending.task_done()
                del item  # a held view would make its session copy its tokens when they next change
