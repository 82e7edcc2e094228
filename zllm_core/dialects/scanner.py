"""Finding a dialect's tags in streamed text without ever releasing half a tag.

A `Markers` set knows every spelling it accepts for each tag (the canonical one, other letter
case, escaped forms). `scan` reports the earliest tag in the text, or else how much of the text
is safe to release: a tail that could still grow into a tag is held until it is decided.
Only that tail (shorter than the longest spelling) is ever re-examined, so a feed costs O(delta).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Iterable

# Non-ASCII letters Python's case-insensitive matching takes for these ASCII ones.
_CASE_PARTNERS = {"i": "i\u0130\u0131", "k": "k\u212a", "s": "s\u017f"}


@dataclass(frozen=True)
class Match:
    tag: str        # canonical spelling of the tag found
    start: int
    end: int
    repair: str | None  # None if spelled canonically, else "case" or "escaped_tag"


def escaped_spellings(tag: str) -> list[str]:
    """HTML-escaped spelling of a tag (`&lt;tool_call&gt;`), which some models produce."""
    escaped = tag.replace("<", "&lt;").replace(">", "&gt;")
    return [escaped] if escaped != tag else []


class Markers:
    def __init__(self, spellings: dict[str, Iterable[str]]):
        """`spellings` maps each canonical tag to its extra accepted spellings."""
        canonical: dict[str, str] = {}
        for tag, extra in spellings.items():
            for spelling in (tag, *extra):
                canonical.setdefault(spelling.lower(), tag)
        ordered = sorted(canonical, key=len, reverse=True)  # longest wins at one position
        # (spelling, its tag) by group: the matched text itself may not lower() back to a key (İ -> i̇)
        self._groups = [(s, canonical[s]) for s in ordered]
        self._find = re.compile("|".join(f"(?P<s{i}>{re.escape(s)})" for i, s in enumerate(ordered)), re.IGNORECASE)
        prefixes = {s[:n] for s in ordered for n in range(1, len(s))}
        by_length = sorted(prefixes, key=len, reverse=True)
        self._partial = re.compile("(?:" + "|".join(map(re.escape, by_length)) + r")\Z", re.IGNORECASE) \
            if by_length else None
        self._longest = max(map(len, ordered))

    def spellings(self) -> tuple[str, ...]:
        """Every text `scan` takes for a tag, ASCII case aside (lower case here): what a
        generator must keep out of text that the parser is to read as plain."""
        return tuple(dict.fromkeys("".join(chars) for s, _ in self._groups
                                   for chars in itertools.product(*(_CASE_PARTNERS.get(c, c) for c in s))))

    @classmethod
    def of(cls, *tags: str, escaped: bool = True) -> "Markers":
        """Tags accepted in any letter case and, if `escaped`, HTML-escaped. Free text keeps
        `escaped=False`: prose may well write `&lt;tool_call&gt;`, a model's call does not."""
        return cls({t: escaped_spellings(t) if escaped else () for t in tags})

    def scan(self, text: str, final: bool) -> tuple[int, Match | None]:
        """(length of text safe to release before any tag, the earliest tag or None)."""
        found = self._find.search(text)
        if found:
            spelling, tag = self._groups[int(found.lastgroup[1:])]
            repair = None if found.group() == tag else "case" if spelling == tag.lower() else "escaped_tag"
            return found.start(), Match(tag, found.start(), found.end(), repair)
        if final or self._partial is None:
            return len(text), None
        window = max(0, len(text) - self._longest + 1)
        held = self._partial.search(text, window)
        return (held.start() if held else len(text)), None
