"""A multilingual corpus that is not ASCII-dominated, generated on this machine from registry
packages: Faker's locale providers (prose, names, addresses) and Babel's CLDR data (the names
of languages, territories, months and units in each locale), in the shapes agents send:
translation catalogues, documentation paragraphs, code and JSON whose strings are in the
locale's script, and requests that mix prose with code.

Deterministic for a given seed and package versions. `multilingual_text(chars)` is what the
benchmarks and the exactness tests read.
"""
from __future__ import annotations

import json
import random

# (Faker locale, CLDR locale) per script; Faker's lorem for hi_IN and ko_KR is Latin, so
# their prose comes from CLDR alone.
LOCALES = [
    ("de_DE", "de"), ("pl_PL", "pl"), ("vi_VN", "vi"), ("fr_FR", "fr"), ("cs_CZ", "cs"),  # Latin + diacritics
    ("ru_RU", "ru"), ("uk_UA", "uk"), ("bg_BG", "bg"),  # Cyrillic
    ("el_GR", "el"),  # Greek
    ("zh_CN", "zh"), ("zh_TW", "zh_Hant"), ("ja_JP", "ja"), ("ko_KR", "ko"),  # CJK and Hangul
    ("ar_AA", "ar"), ("fa_IR", "fa"), ("he_IL", "he"),  # Arabic, Hebrew
    ("hi_IN", "hi"), ("th_TH", "th"),  # Devanagari, Thai
]
LATIN_LOREM = {"hi_IN", "ko_KR"}


class _Locale:
    """One locale's text sources."""

    def __init__(self, faker_locale: str, cldr_locale: str, seed: int):
        from babel import Locale
        from faker import Faker

        self.fake = Faker(faker_locale)
        self.fake.seed_instance(seed)
        self.prose_from_faker = faker_locale not in LATIN_LOREM
        cldr = Locale.parse(cldr_locale)
        self.terms = [v for names in (cldr.languages, cldr.territories, cldr.scripts, cldr.currencies)
                      for v in names.values()]
        self.terms += list(cldr.months["format"]["wide"].values()) + list(cldr.days["format"]["wide"].values())
        self.catalogue = sorted({**cldr.territories, **cldr.languages}.items())
        self.code = cldr_locale

    def sentence(self, rng: random.Random) -> str:
        if self.prose_from_faker:
            return self.fake.sentence(nb_words=rng.randint(6, 16))
        return " ".join(rng.choices(self.terms, k=rng.randint(5, 12))) + "."

    def paragraph(self, rng: random.Random) -> str:
        return " ".join(self.sentence(rng) for _ in range(rng.randint(2, 6)))


def _catalogue(loc: _Locale, rng: random.Random) -> str:
    """Translation catalogue lines: `msgid`/`msgstr` pairs or key = value, as in .po and .properties."""
    start = rng.randrange(len(loc.catalogue))
    rows = loc.catalogue[start:start + rng.randint(8, 30)]
    if rng.random() < 0.5:
        return "\n".join(f'msgid "{key}"\nmsgstr "{value}"\n' for key, value in rows)
    return "\n".join(f"{loc.code}.{key.lower()} = {value}" for key, value in rows)


def _records(loc: _Locale, rng: random.Random) -> str:
    """JSON records with strings in the locale's script, as tool results carry them."""
    rows = [{"id": rng.randrange(10**6), "name": loc.fake.name(), "address": loc.fake.address(),
             "company": loc.fake.company(), "note": loc.sentence(rng)} for _ in range(rng.randint(2, 6))]
    return json.dumps(rows, ensure_ascii=False, indent=rng.choice([None, 2]))


def _code(loc: _Locale, rng: random.Random) -> str:
    """Source code whose literals, comments and docstrings are in the locale's script."""
    name = f"greet_{loc.code.lower()}"
    lines = [f"def {name}(user: str, count: int = {rng.randint(1, 99)}) -> str:",
             f'    """{loc.sentence(rng)}"""',
             f"    # {loc.sentence(rng)}",
             f'    city = "{loc.fake.city()}"',
             f'    return f"{{user}}, {loc.sentence(rng)} ({{count}}, {{city}})"',
             "",
             f"MESSAGES_{loc.code.upper()} = {{"]
    lines += [f'    "{key}": "{value}",' for key, value in rng.sample(loc.catalogue, 4)]
    return "\n".join(lines + ["}", ""])


def _request(loc: _Locale, rng: random.Random) -> str:
    """An agent request: prose in the locale around a fenced snippet and an error message."""
    return (f"{loc.paragraph(rng)}\n\n```python\n{_code(loc, rng)}```\n\n"
            f"Traceback: KeyError: '{rng.choice(loc.terms)}' -- {loc.sentence(rng)}\n")


def _markdown(loc: _Locale, rng: random.Random) -> str:
    """Documentation: a heading, paragraphs, a list with inline code."""
    items = "\n".join(f"- `{loc.code}_{k}`: {loc.sentence(rng)}" for k in range(rng.randint(2, 5)))
    return f"## {rng.choice(loc.terms)}\n\n{loc.paragraph(rng)}\n\n{items}\n\n{loc.paragraph(rng)}\n"


def _prose(loc: _Locale, rng: random.Random) -> str:
    return loc.paragraph(rng) + "\n"


# Prose is weighted up so that most characters are not ASCII: the other kinds carry ASCII
# syntax (keys, indentation, fences) around their strings.
KINDS = {_catalogue: 1, _records: 1, _code: 1, _request: 1, _markdown: 2, _prose: 3}


def multilingual_documents(limit_chars: int, seed: int = 25) -> list[str]:
    """Documents of every kind and locale, in a seeded random order, until `limit_chars`."""
    rng = random.Random(seed)
    locales = [_Locale(f, c, seed) for f, c in LOCALES]
    docs, size = [], 0
    while size < limit_chars:
        kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        doc = kind(rng.choice(locales), rng)
        docs.append(doc)
        size += len(doc) + 2
    return docs


def multilingual_text(limit_chars: int, seed: int = 25) -> str:
    return "\n\n".join(multilingual_documents(limit_chars, seed))[:limit_chars]
