"""GenerationGuard: notices a generation looping and breaks the loop before the next sample.

A loop is the generated tail made of one n-gram repeated (n = 1: one token over and over).
The guard then excludes the token that would continue the cycle; a generation that falls back
into loops `max_breaks` times is ended (its end tokens become the only choice), unless a fence
holds a structure open: the fence wins every conflict, so the guard only ever narrows what the
fence allows and never empties it.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GuardConfig:
    max_cycle: int = 8      # the longest repeated n-gram looked for, in tokens
    min_repeats: int = 4    # an n-gram repeated this many times in a row is a loop...
    min_span: int = 12      # ...once the repetition covers at least this many tokens
    max_breaks: int = 3     # loops broken before the turn is ended


@dataclass
class GenerationGuard:
    config: GuardConfig = field(default_factory=GuardConfig)
    tail: list[int] = field(default_factory=list)
    breaks: int = 0
    banned: int | None = None  # the token that would continue the current loop

    def observe(self, token: int) -> None:
        self.tail.append(token)
        del self.tail[:-max(self.config.max_cycle * self.config.min_repeats, self.config.min_span)]
        looping = self._cycle()
        if looping is not None and self.banned is None:
            self.breaks += 1
        self.banned = looping

    @property
    def exhausted(self) -> bool:
        """Loops keep coming back: the turn should end."""
        return self.breaks > self.config.max_breaks

    def _cycle(self) -> int | None:
        """The token continuing the repeated n-gram that ends the tail, if there is one."""
        c, tail = self.config, self.tail
        for n in range(1, c.max_cycle + 1):
            span = max(n * c.min_repeats, c.min_span)
            if len(tail) < span:
                break
            window = tail[-span:]
            if all(window[i] == window[i - n] for i in range(n, span)):
                return tail[-n]
        return None
