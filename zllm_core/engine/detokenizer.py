"""Streaming detokenization with stop strings.

Tokens arrive as byte strings that may split a UTF-8 character, and a stop string may
span tokens; text is released only once it can no longer become part of either.
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
        self._stop = list(stop)
        self._pending = b""  # bytes of a character not complete yet
        self._text = ""  # everything decoded so far
        self._sent = 0  # how much of _text has been released
        self.stopped: str | None = None  # the stop string that ended the text, once one has

    def push(self, token_ids: Sequence[int]) -> str:
        """Add tokens; return newly releasable text. After a stop string, ``stopped`` is set."""
        buf = self._pending + self._decode_bytes(token_ids)
        cut = len(buf) - _incomplete_tail(buf)
        self._pending = buf[cut:]
        self._text += buf[:cut].decode("utf-8", errors="replace")
        return self._release(final=False)

    def flush(self) -> str:
        """End of generation: release whatever is held back."""
        if self._pending:
            self._text += self._pending.decode("utf-8", errors="replace")
            self._pending = b""
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        if self.stopped:
            return ""
        hit = self._first_stop()
        if hit is not None:
            end, self.stopped = hit
            self._text = self._text[:end]
        else:
            end = len(self._text) if final else len(self._text) - self._held_back()
        out = self._text[self._sent:end]
        self._sent = max(self._sent, end)
        return out

    def _first_stop(self) -> tuple[int, str] | None:
        """Where the earliest stop string starts, and which one it is."""
        window = max((len(s) for s in self._stop), default=0)
        lo = max(0, self._sent - window + 1)
        found = [(i, s) for s in self._stop if (i := self._text.find(s, lo)) >= 0]
        return min(found) if found else None

    def _held_back(self) -> int:
        """Characters at the end of the text that could still begin a stop string."""
        tail = self._text[self._sent:]
        for n in range(min(len(tail), max((len(s) for s in self._stop), default=1) - 1), 0, -1):
            if any(s.startswith(tail[-n:]) for s in self._stop):
                return n
        return 0
