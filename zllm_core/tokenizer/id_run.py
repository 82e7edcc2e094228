"""A conversation's ids in one buffer that grows at its end only.

Each prompt of a conversation is the previous prompt, its generation and some new ids; each
generation recorded is its prompt and the generated ids. Concatenating them copies the whole
context every turn (a megabyte at 300K tokens, twice). Instead they are read-only views of
one buffer: an extension writes past the end of everything handed out so far, so no view
ever sees a change, and only a branch (an extension of an earlier view) copies. The buffer is
read-only between extensions, so its views are frozen arrays (cache/token_ids.py) that the
engine holds as they are instead of copying them.
"""
from __future__ import annotations

import threading

import numpy as np

GROWTH = 1.5  # capacity over length when the buffer is reallocated


class IdRun:
    def __init__(self, head: np.ndarray, tail: np.ndarray):
        n = len(head) + len(tail)
        self._data = np.empty(max(16, int(n * GROWTH)), dtype=head.dtype)
        self._data[:len(head)] = head
        self._data[len(head):n] = tail
        self._data.flags.writeable = False
        self._end = n
        self._lock = threading.Lock()  # two requests may extend one conversation at once

    @classmethod
    def of(cls, head: np.ndarray, tail: np.ndarray) -> tuple[np.ndarray, IdRun]:
        """A run holding `head` then `tail` (copied once) and its view of them."""
        run = cls(head, tail)
        return run._view(run._end), run

    def extend(self, ids: np.ndarray, tail: np.ndarray) -> tuple[np.ndarray, IdRun]:
        """`ids` (a view this run handed out, or any array) followed by `tail`: in place when
        `ids` ends where this run's writes end, else in a new run."""
        n, m = len(ids), len(tail)
        with self._lock:
            if self._holds(ids) and n == self._end:
                if n + m > len(self._data):  # views of the old buffer keep it alive
                    grown = np.empty(int((n + m) * GROWTH), dtype=self._data.dtype)
                    grown[:n] = self._data[:n]
                    self._data = grown
                # Writable only while it writes, and only past every view handed out.
                self._data.flags.writeable = True
                self._data[n:n + m] = tail
                self._data.flags.writeable = False
                self._end = n + m
                return self._view(n + m), self
        return IdRun.of(ids, tail)

    def _holds(self, ids: np.ndarray) -> bool:
        """Whether `ids` is a leading view of this run's buffer."""
        return ids.base is self._data and ids.ctypes.data == self._data.ctypes.data

    def _view(self, n: int) -> np.ndarray:
        return self._data[:n]  # read-only, as the buffer is between writes

    @property
    def nbytes(self) -> int:
        return self._data.nbytes
