"""The engine's heap trimmer gives a fragmented C heap's free pages back to the OS."""
import ctypes
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zllm_core.engine.heap_trim import HeapTrimmer


def rss() -> int:
    return int(re.search(r"^VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) << 10


def fragment_and_trim() -> tuple[int, int]:
    """What a step leaves behind: 160 MiB of 64 KiB buffers (under glibc's mmap threshold, so
    on the heap), each followed by a small allocation that lives on, then the buffers freed.
    The pins keep the free space off the heap's top, so free() alone keeps it resident.
    Returns (bytes free() gave back, bytes the trim gave back)."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    buffers, pins = [], []
    for _ in range(2560):
        buffers.append(libc.malloc(64 << 10))
        ctypes.memset(buffers[-1], 1, 64 << 10)
        pins.append(libc.malloc(64))
    peak = rss()
    for b in buffers:
        libc.free(b)
    held = rss()
    HeapTrimmer().trim()
    return peak - held, held - rss()


@pytest.mark.skipif(not HeapTrimmer().available or not Path("/proc/self/status").exists(),
                    reason="needs glibc and /proc")
def test_trim_returns_the_free_middle_of_the_heap():
    # A fresh process: in this one, earlier tests' free chunks would take the pins.
    out = subprocess.run([sys.executable, __file__], capture_output=True, text=True, check=True).stdout
    by_free, by_trim = map(int, out.split())
    assert by_trim > 100 << 20 and by_trim > 4 * by_free  # without the trim: 0


if __name__ == "__main__":
    print(*fragment_and_trim())
