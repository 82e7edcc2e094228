"""Tracking JSON nesting over streamed text, so tags inside JSON strings are never taken for tags."""
from __future__ import annotations

import re

_STRUCTURE = re.compile(r'["{}\[\],]')
_STRING_STOP = re.compile(r'["\\]')


class JsonDepth:
    """Walks a growing JSON text and reports its structural characters outside strings."""

    def __init__(self, start: int = 0) -> None:
        self.depth = 0
        self.pos = start
        self._in_string = False

    def advance(self, text: str) -> list[tuple[int, str, int]]:
        """(index, char, depth after it) for each structural char in text[pos:] outside strings."""
        found: list[tuple[int, str, int]] = []
        while self.pos < len(text):
            if self._in_string:
                m = _STRING_STOP.search(text, self.pos)
                if m is None:
                    self.pos = len(text)
                elif m.group() == "\\":
                    self.pos = m.end() + 1  # may pass the end: the escaped char is still to come
                else:
                    self._in_string, self.pos = False, m.end()
                continue
            m = _STRUCTURE.search(text, self.pos)
            if m is None:
                self.pos = len(text)
                break
            char, self.pos = m.group(), m.end()
            if char == '"':
                self._in_string = True
                continue
            if char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
            found.append((m.start(), char, self.depth))
        return found
