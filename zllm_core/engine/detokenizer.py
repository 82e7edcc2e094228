"""Streaming detokenization with stop strings.

Tokens arrive as byte strings that may split a UTF-8 character, and a stop string may
span tokens; text is released only once it can no longer become part of either.
Work and memory are linear in the output: the detokenizer keeps only the text it holds
back and the last (longest stop string - 1) characters it released, which is all a stop
string that spans the boundary can reach into.
"""
from __future__ import annotations

from typing import Callable, Sequence


def _incomplete_tail(buf: bytes) -> int:
    """Length of a trailing, not yet complete UTF-8 sequence in ``buf`` (0..3)."""
    for back in range(1, min(4, len(buf)) + 1):
        b = buf[-back]
        if b & 0xC0 != 0x80:  # a lead (or ASCII) byte
            need = 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4 if b >> 3 == 0b11110 else 1
            return back if need > back else 0
    return 0


class StreamDetokenizer:
    def __init__(self, decode_bytes: Callable[[Sequence[int]], bytes], stop: Sequence[str] = ()):
        self._decode_bytes = decode_bytes
        self._stop = list(stop)  # no empty one: SamplingParams rejects them
        self._reach = max((len(s) for s in self._stop), default=1) - 1  # released characters kept
        self._pending = b""  # bytes of a character not complete yet
        self._released = ""  # the last released characters, at most _reach of them
        self._held = ""  # decoded text not released yet: it may begin a stop string
        self.stopped: str | None = None  # the stop string that ended the text, once one has

    def push(self, token_ids: Sequence[int]) -> str:
        """Add tokens; return newly releasable text. After a stop string, ``stopped`` is set."""
        if self.stopped:
            return ""
        buf = self._pending + self._decode_bytes(token_ids)
        cut = len(buf) - _incomplete_tail(buf)
        self._pending = buf[cut:]
        return self._release(buf[:cut].decode("utf-8", errors="replace"), final=False)

    def flush(self) -> str:
        """End of generation: release whatever is held back."""
        if self.stopped:
            return ""
        text, self._pending = self._pending.decode("utf-8", errors="replace"), b""
        return self._release(text, final=True)

    def _release(self, text: str, final: bool) -> str:
        if not self._stop:
            return text
        start = len(self._released)  # window[start:] is what has not been released
        window = self._released + self._held + text
        found = [(i, s) for s in self._stop if (i := window.find(s)) >= 0]
        if found:
            end, self.stopped = min(found)
            self._released = self._held = ""
            return window[start:end]
        end = len(window) if final else len(window) - self._held_back(window[start:])
        self._released = window[max(0, end - self._reach):end]
        self._held = window[end:]
        return window[start:end]

    def _held_back(self, tail: str) -> int:
        """Characters at the end of ``tail`` that could still begin a stop string."""
        for n in range(min(len(tail), self._reach), 0, -1):
            if any(s.startswith(tail[-n:]) for s in self._stop):
                return n
        return 0
