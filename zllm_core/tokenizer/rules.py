"""Pre-tokenizer rule tables: each supported regex, decomposed into rules over character classes.

Every code point has one class (native `CharClass`): Lu, Ll, Lt, Lm, Lo (letters by case),
Mark (\\p{M}), Num (\\p{N}), Space (\\s but CR and LF), CR, LF, Other. The tables are probed
from the reference regex engine (tools/gen_unicode_classes.py), so class membership is exact.

A family's regex is an ordered alternation; at a piece start the first alternative that
matches wins. `Rules` names, per alternative, which shape the family uses. Every shape's extent
is determined by

- the class of the first one or two characters (an optional one-character prefix: a space, or
  any of [^\\r\\n\\p{L}\\p{N}]),
- the end of a same-class run that follows (letters, digits, punctuation, spaces),
- bounded offsets inside a run (digit groups of `digit_group`),
- run-level aggregates of a whitespace run: whether it reaches the end of the text, where its
  last CR/LF is, and where its last character starts (`\\s+(?!\\S)` leaves that character to
  prefix the next piece),
- a bounded look-ahead for contractions (an apostrophe and at most two letters), and, for the
  case-aware o200k letters, the last character inside an upper-case run that is also allowed
  in a lower-case run (Lm, Lo, M), where `[U]*[W]+` gives back characters.

None needs backtracking over unbounded text, which is what lets a parallel evaluator decide
piece starts with scans (run ends, last newline, last W in a run) plus per-character
predicates; the sequential evaluator in csrc/pretokenizer.cpp reads the same fields.

`exact` records whether the rules reproduce the reference regex on every input; tests check
them piece for piece against tiktoken and Hugging Face tokenizers. Patterns not listed here
are refused (UnsupportedTokenizer), never approximated.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from enum import IntEnum

from zllm_core import _native


class Contractions(IntEnum):
    NONE = 0
    PREFIX_CASE_SENSITIVE = 1    # '(?:[sdmt]|ll|ve|re) as its own piece
    PREFIX_CASE_INSENSITIVE = 2  # (?i:'s|'t|'re|'ve|'m|'ll|'d); s also matches U+017F
    SUFFIX_CASE_INSENSITIVE = 3  # o200k: the same, appended to a letter run


class Letters(IntEnum):
    SPACE_PREFIXED = 0  # ` ?\p{L}+`
    ANY_PREFIXED = 1    # `[^\r\n\p{L}\p{N}]?\p{L}+`
    CASED = 2           # o200k: `P?[U]*[W]+C?|P?[U]+[W]*C?`


@dataclass(frozen=True)
class Rules:
    """One regex's rules; fields mirror the native `Grammar`."""

    name: str
    contractions: Contractions = Contractions.NONE
    letters: Letters = Letters.ANY_PREFIXED
    digit_group: int = 0              # `\p{N}{1,k}`; 0 = one unbounded run
    digit_space_prefix: bool = False  # ` ?\p{N}+`
    punct_space_prefix: bool = True   # ` ?[^\s\p{L}\p{N}]+`
    punct_newlines: bool = False      # `[\r\n]*` after punctuation
    punct_slash: bool = False         # `/` joins that suffix
    space_run_to_end: bool = False    # `\s+$`: a space run reaching the end is one piece
    newline_rule: bool = False        # `\s*[\r\n]+`: a space run ends after its last newline
    digits_only: bool = False         # Split(`\p{N}{1,k}`), k = digit_group: digit groups, the rest as gaps
    exact: bool = True

    def to_native(self) -> _native.Grammar:
        g = _native.Grammar()
        for key, value in asdict(self).items():
            if key not in ("name", "exact"):
                setattr(g, key, int(value) if isinstance(value, IntEnum) else value)
        return g


R50K = Rules("r50k", Contractions.PREFIX_CASE_SENSITIVE, Letters.SPACE_PREFIXED,
             digit_space_prefix=True, space_run_to_end=True)
CL100K = Rules("cl100k", Contractions.PREFIX_CASE_INSENSITIVE, digit_group=3,
               punct_newlines=True, space_run_to_end=True, newline_rule=True)
LLAMA3 = Rules("llama3", Contractions.PREFIX_CASE_INSENSITIVE, digit_group=3,
               punct_newlines=True, newline_rule=True)
QWEN2 = Rules("qwen2", Contractions.PREFIX_CASE_INSENSITIVE, digit_group=1,
              punct_newlines=True, newline_rule=True)
O200K = Rules("o200k", Contractions.SUFFIX_CASE_INSENSITIVE, Letters.CASED, digit_group=3,
              punct_newlines=True, punct_slash=True, newline_rule=True)
DIGIT_GROUPS = Rules("digit_groups", digit_group=3, digits_only=True)
DIGITS = Rules("digits", digit_group=1, digits_only=True)  # HF Digits(individual_digits=True)

CL100K_PATTERN = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"
                  r"|\s++$|\s*[\r\n]|\s+(?!\S)|\s")
_O200K_WORD = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_O200K_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_SUFFIX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"

# The exact regex strings the rules stand for (as tiktoken's families.json and Hugging Face
# tokenizer.json files spell them).
PATTERNS: dict[str, Rules] = {
    r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s": R50K,
    # GPT-2's ByteLevel(use_regex=True) regex: `\s+(?!\S)|\s+` splits exactly as r50k's tail.
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+": R50K,
    CL100K_PATTERN: CL100K,
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": LLAMA3,
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": QWEN2,
    rf"[^\r\n\p{{L}}\p{{N}}]?{_O200K_WORD}*{_O200K_LOWER}+{_SUFFIX}"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_O200K_WORD}+{_O200K_LOWER}*{_SUFFIX}"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+": O200K,
    r"\p{N}{1,3}": DIGIT_GROUPS,
    r"\p{N}": DIGITS,
}
# Hugging Face runs Split patterns on Oniguruma (Ruby syntax), where `{1,3}+` is not possessive
# but `(?:{1,3})+`: cl100k's digit groups become one unbounded digit run there.
ONIG_PATTERNS: dict[str, Rules] = {
    **PATTERNS,
    CL100K_PATTERN: replace(CL100K, name="cl100k_onig", digit_group=0),
}
GPT2_BYTE_LEVEL_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


class UnsupportedTokenizer(ValueError):
    """A vocabulary or tokenizer.json field this tokenizer cannot reproduce exactly."""


def rules_for_pattern(pattern: str, field: str, engine: str = "tiktoken") -> Rules:
    """The rules of `pattern` as `engine` ("tiktoken" or "onig") reads it."""
    try:
        return (ONIG_PATTERNS if engine == "onig" else PATTERNS)[pattern]
    except KeyError:
        raise UnsupportedTokenizer(f"{field}: no exact class rules for pattern {pattern!r}") from None
