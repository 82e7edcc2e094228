"""Tracking JSON nesting over streamed text, so tags inside JSON strings are never taken for tags."""
from __future__ import annotations

import re

_STRUCTURE = re.compile(r'["{}\[\],]')
_STRING_STOP = re.compile(r'["\\]')


class JsonDepth:
    """Walks JSON text chunk by chunk and reports its structural characters outside strings."""

    def __init__(self) -> None:
        self.depth = 0
        self._in_string = False
        self._escaped = False  # the chunk ended on a backslash inside a string

    def advance(self, chunk: str) -> list[tuple[int, str, int]]:
        """(offset in chunk, char, depth after it) for each structural char outside strings."""
        found: list[tuple[int, str, int]] = []
        i = 0
        if self._escaped and chunk:
            i, self._escaped = 1, False
        while i < len(chunk):
            if self._in_string:
                m = _STRING_STOP.search(chunk, i)
                if m is None:
                    break
                if m.group() == '"':
                    self._in_string, i = False, m.end()
                elif m.end() == len(chunk):
                    self._escaped = True
                    break
                else:
                    i = m.end() + 1
                continue
            m = _STRUCTURE.search(chunk, i)
            if m is None:
                break
            char, i = m.group(), m.end()
            if char == '"':
                self._in_string = True
                continue
            self.depth += 1 if char in "{[" else -1 if char in "}]" else 0
            found.append((m.start(), char, self.depth))
        return found
