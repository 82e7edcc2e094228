"""The regular subset of JSON Schema `pattern` (ECMA-262 syntax), over JSON-encoded characters.

A pattern constrains the decoded string, while the fence runs over its JSON spelling, so each
character becomes the bytes json.dumps writes for it. Supported: literals and escapes (`\\d`,
`\\w`, `\\s`, `\\.` ...), `.`, classes `[a-z_]` and `[^...]` over ASCII, groups `(...)` and
`(?:...)`, `|`, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, anchors `^` and `$` at the ends.
Unanchored ends match anything, as JSON Schema's search semantics say. Backreferences,
lookaround and anchors inside the pattern raise RegexError.
"""
from __future__ import annotations

import json
from typing import Callable

from zllm_core.fence.automaton import Expr, Lit, Repeat, alt, seq, utf8_multibyte

MAX_REPEAT = 256


class RegexError(ValueError):
    pass


def json_char(c: str) -> Expr:
    return Lit(json.dumps(c, ensure_ascii=False)[1:-1].encode())


_CLASSES = {
    "d": [chr(c) for c in range(ord("0"), ord("9") + 1)],
    "w": [chr(c) for c in range(128) if chr(c).isalnum() or chr(c) == "_"],
    # ECMA-262 WhiteSpace and LineTerminator code points.
    "s": [" ", "\t", "\n", "\r", "\f", "\v", "\u00a0", "\u1680", *map(chr, range(0x2000, 0x200B)),
          "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff"],
}
_CONTROL = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "0": "\0"}


def compile_pattern(pattern: str, any_char: Expr, encode: Callable[[str], Expr] = json_char) -> Expr:
    """`any_char` is one character of the target (for unanchored ends and negated classes)."""
    body, anchored_start, anchored_end = pattern, False, False
    if body.startswith("^"):
        body, anchored_start = body[1:], True
    if body.endswith("$") and not body.endswith("\\$"):
        body, anchored_end = body[:-1], True
    parser = _Parser(body, any_char, encode)
    expr = parser.alternation()
    if parser.i != len(body):
        raise RegexError(f"unexpected '{body[parser.i]}' at {parser.i} in pattern {pattern!r}")
    free = Repeat(any_char)
    return seq(Lit(b"") if anchored_start else free, expr, Lit(b"") if anchored_end else free)


class _Parser:
    def __init__(self, text: str, any_char: Expr, encode: Callable[[str], Expr]):
        self.text, self.i, self.any, self.encode = text, 0, any_char, encode

    def peek(self) -> str | None:
        return self.text[self.i] if self.i < len(self.text) else None

    def take(self) -> str:
        if self.i >= len(self.text):
            raise RegexError("the pattern ends inside an escape, class or group")
        c = self.text[self.i]
        self.i += 1
        return c

    def alternation(self) -> Expr:
        options = [self.sequence()]
        while self.peek() == "|":
            self.take()
            options.append(self.sequence())
        return alt(*options)

    def sequence(self) -> Expr:
        parts = []
        while self.peek() not in (None, "|", ")"):
            parts.append(self.quantified(self.atom()))
        return seq(*parts)

    def quantified(self, atom: Expr) -> Expr:
        c = self.peek()
        if c == "*":
            self.take()
            return self._lazy_free(Repeat(atom))
        if c == "+":
            self.take()
            return self._lazy_free(Repeat(atom, 1))
        if c == "?":
            self.take()
            return self._lazy_free(Repeat(atom, 0, 1))
        if c == "{" and self._is_bound():
            lo, hi = self._bound()
            return self._lazy_free(Repeat(atom, lo, hi))
        return atom

    def _lazy_free(self, e: Expr) -> Expr:
        if self.peek() == "?":  # a lazy quantifier matches the same strings
            self.take()
        return e

    def _is_bound(self) -> bool:
        end = self.text.find("}", self.i)
        inner = self.text[self.i + 1:end] if end > 0 else ""
        return bool(inner) and all(ch.isdigit() or ch == "," for ch in inner) and inner[0].isdigit()

    def _bound(self) -> tuple[int, int | None]:
        end = self.text.index("}", self.i)
        inner = self.text[self.i + 1:end]
        self.i = end + 1
        lo_text, comma, hi_text = inner.partition(",")
        lo = int(lo_text)
        hi = lo if not comma else (int(hi_text) if hi_text else None)
        if max(lo, hi or 0) > MAX_REPEAT:
            raise RegexError(f"repetition bounds above {MAX_REPEAT} are not supported")
        if hi is not None and hi < lo:
            raise RegexError(f"{{{inner}}}: the upper bound is below the lower")
        return lo, hi

    def atom(self) -> Expr:
        c = self.take()
        if c == "(":
            if self.text.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise RegexError("lookaround and named groups are not supported")
            inner = self.alternation()
            if self.peek() != ")":
                raise RegexError("unbalanced parenthesis")
            self.take()
            return inner
        if c == "[":
            return self._class()
        if c == ".":
            return self._chars_except(["\n", "\r", "\u2028", "\u2029"])
        if c == "\\":
            return self._escape(in_class=False)
        if c in "^$":
            raise RegexError("anchors are supported only at the start and end of the pattern")
        if c in "*+?{":
            raise RegexError(f"'{c}' has nothing to repeat")
        return self.encode(c)

    def _escape(self, in_class: bool) -> Expr:
        if self.peek() is None:
            raise RegexError("the pattern ends with a backslash")
        c = self.take()
        if c in _CLASSES:
            return alt(*(self.encode(x) for x in _CLASSES[c]))
        if c in "DW":
            return self._chars_except(_CLASSES[c.lower()])
        if c == "S":
            raise RegexError("\\S is not supported (its complement spans non-ASCII spaces)")
        if c in "ux":
            return self.encode(self._code_point(4 if c == "u" else 2))
        if c.isdigit() and c != "0":
            raise RegexError("backreferences are not supported")
        if c in "bB":
            raise RegexError("word boundaries are not supported")
        if c.isalnum() and c not in _CONTROL:
            raise RegexError(f"the escape \\{c} is not supported")
        return self.encode(_CONTROL.get(c, c))

    def _code_point(self, digits: int) -> str:
        text = self.text[self.i:self.i + digits]
        if len(text) != digits or any(ch not in "0123456789abcdefABCDEF" for ch in text):
            raise RegexError(f"a \\u or \\x escape needs {digits} hex digits")
        self.i += digits
        return chr(int(text, 16))

    def _class(self) -> Expr:
        negated = self.peek() == "^"
        if negated:
            self.take()
        chars: list[str] = []
        options: list[Expr] = []
        first = True
        while self.peek() != "]" or first:
            if self.peek() is None:
                raise RegexError("unterminated character class")
            first = False
            c = self.take()
            if c == "\\":
                if self.peek() in _CLASSES:
                    chars += _CLASSES[self.take()]
                    continue
                if self.peek() in ("D", "W", "S"):
                    raise RegexError("negated escapes inside a class are not supported")
                c = self.take()
                if c in "ux":
                    c = self._code_point(4 if c == "u" else 2)
                elif c == "b":
                    c = "\b"  # inside a class, \b is the backspace
                elif c.isalnum() and c not in _CONTROL:
                    raise RegexError(f"the escape \\{c} is not supported in a class")
                else:
                    c = _CONTROL.get(c, c)
            if self.peek() == "-" and self.text[self.i + 1:self.i + 2] not in ("]", ""):
                self.take()
                end = self.take()
                if end == "\\":
                    end = self.take()
                if ord(end) < ord(c):
                    raise RegexError(f"range {c}-{end} is out of order")
                if ord(end) - ord(c) > 4096:
                    raise RegexError("character ranges wider than 4096 code points are not supported")
                chars += [chr(x) for x in range(ord(c), ord(end) + 1)]
            else:
                chars.append(c)
        self.take()
        if negated:
            return self._chars_except(chars)
        options += [self.encode(x) for x in dict.fromkeys(chars)]
        return alt(*options)

    def _chars_except(self, excluded: list[str]) -> Expr:
        """Any character but these: ASCII is spelled out, every non-ASCII character stays allowed
        unless excluded (then the pattern is refused rather than approximated)."""
        if any(ord(x) >= 128 for x in excluded if x not in ("\u2028", "\u2029")):
            raise RegexError("negated classes with non-ASCII characters are not supported")
        ascii_ok = [self.encode(chr(c)) for c in range(128) if chr(c) not in excluded]
        return alt(*ascii_ok, utf8_multibyte(line_separators="\u2028" not in excluded))

