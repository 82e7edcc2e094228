"""Hands the C heap's free pages back to the OS, from the engine thread, at most every few seconds.

On a CPU the engine thread's glibc arena holds each step's activations (up to tens of MB for a
prefill chunk) between long-lived allocations such as oneDNN's cached primitives. glibc returns
memory to the OS only from the top of an arena, so the freed middle stays resident: in the
32-session soak (issue 28) the engine's arena held ~240 MiB free in ~10,000 chunks by the end,
and the server's RSS kept rising while the bytes in use were flat. ``malloc_trim(0)`` releases
the free pages of every arena (madvise); it takes milliseconds, so the engine thread calls it
between steps, busy or idle, at most every few seconds. Not glibc (musl, macOS): nothing to do.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import time
from typing import Callable, Optional


def _malloc_trim() -> Optional[Callable[[int], int]]:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        return libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


class HeapTrimmer:
    def __init__(self, every: float = 5.0):
        self.every = every
        self._trim = _malloc_trim()
        self._last = time.monotonic()

    @property
    def available(self) -> bool:
        return self._trim is not None

    def maybe_trim(self) -> None:
        if time.monotonic() - self._last >= self.every:
            self.trim()

    def trim(self) -> None:
        if self._trim is not None:
            self._trim(0)
        self._last = time.monotonic()
