"""Text kept as the earlier text it extends and what follows.

A resent conversation's prompt is its previous prompt and a few new kilobytes. Joining them
into one string copies the whole context every turn (4 MB at a million characters of wide
text). A `Rope` holds the previous prompt object itself and the new text, so the renderer
builds a prompt, and the tokenizer proves a recorded span (by the identity of the text it was
recorded under) and reads the new text, in O(new text). The whole string is made only where a
consumer needs one (`flat`), off the path of a continuing conversation, and once every
`MAX_DEPTH` extensions, which keeps walks over a rope short.
"""
from __future__ import annotations

import sys
from typing import Iterable, Union

MAX_DEPTH = 64


class Rope:
    __slots__ = ("head", "tail", "depth", "_len", "__weakref__")

    def __init__(self, head: Text, tail: str):
        if isinstance(head, Rope) and head.depth >= MAX_DEPTH:
            head = str(head)
        self.head = head  # the earlier text
        self.tail = tail
        self.depth = head.depth + 1 if isinstance(head, Rope) else 1
        self._len = len(head) + len(tail)

    def __len__(self) -> int:
        return self._len

    def __str__(self) -> str:
        pieces, node = [], self
        while isinstance(node, Rope):
            pieces.append(node.tail)
            node = node.head
        pieces.append(node)
        return "".join(reversed(pieces))

    def __repr__(self) -> str:
        return f"Rope({len(self)} characters, ending {self.tail[-32:]!r})"

    def endswith(self, suffix: str) -> bool:
        if len(suffix) <= len(self.tail):
            return self.tail.endswith(suffix)
        return str(self).endswith(suffix)


Text = Union[str, Rope]


def flat(text: Text) -> str:
    return text if isinstance(text, str) else str(text)


def suffix_from(text: Text, start: int) -> str:
    """text[start:], from the last piece alone when it holds all of it."""
    if isinstance(text, Rope) and start >= len(text.head):
        return text.tail[start - len(text.head):]
    return flat(text)[start:]


def startswith_at(text: Text, s: str, start: int) -> bool:
    """text.startswith(s, start), from the last piece alone when it holds all of it."""
    if isinstance(text, str):
        return text.startswith(s, start)
    return suffix_from(text, start).startswith(s) if start >= len(text.head) else flat(text).startswith(s, start)


def nbytes(texts: Iterable[Text]) -> int:
    """The memory of `texts`, each piece counted once (texts of a conversation share pieces)."""
    seen, total = set(), 0
    for text in texts:
        while id(text) not in seen:
            seen.add(id(text))
            if isinstance(text, str):
                total += sys.getsizeof(text)
                break
            total += sys.getsizeof(text.tail) + 64
            text = text.head
    return total
