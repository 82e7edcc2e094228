"""JSON values under a JSON Schema, as a byte-level expression (see automaton.py).

The layout is `json.dumps`' (`{"a": 1, "b": [true, null]}`, raw UTF-8, the canonical escapes), so
fenced output looks like what templates render. What the expression accepts is always valid
under the schema; where a schema allows more than a regular language can say, the fence allows
a valid part of it and says so here:
- properties appear in declaration order, each at most once, required ones always; no
  additional properties are generated (valid under any `additionalProperties`);
- free-form values (`{}`, an object without `properties`) nest at most FREE_DEPTH deep;
- `maxLength`/`maxItems` above LENGTH_CAP/ITEMS_CAP are generated up to the cap;
- `number` with bounds generates integers within them;
- `oneOf` is treated as `anyOf` (exclusive alternatives are the agent schemas' norm).
Keywords that constrain values in ways not listed fail fast with `UnsupportedSchema` naming the
keyword; annotations (`description`, `title`, `default`, `examples`, `format`, `$schema`,
`$id`, `$comment`, `deprecated`, `readOnly`, `writeOnly`) are ignored.
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable

from jsonschema import Draft202012Validator

from zllm_core.fence.automaton import (
    EMPTY, Expr, Lit, Repeat, alt, byte_range, one_of, opt, seq, utf8_multibyte,
)
from zllm_core.fence.regex import RegexError, compile_pattern, json_char

FREE_DEPTH = 2  # each level multiplies the automaton's states (depth 3: ~12K)
LENGTH_CAP = 512
ITEMS_CAP = 16
ANNOTATIONS = {"description", "title", "default", "examples", "format", "$schema", "$id", "$comment",
               "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "nullable"}
HANDLED = {"type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf",
           "items", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
           "exclusiveMinimum", "exclusiveMaximum", "pattern", "propertyNames", "$ref", "allOf"}
RAW_STRING = {"type", "enum", "const", "minLength", "maxLength", "pattern"}
DIGIT = byte_range(ord("0"), ord("9"))
NONZERO = byte_range(ord("1"), ord("9"))
RAW_CHAR = alt(byte_range(0x00, 0x7F), utf8_multibyte())  # one well-formed UTF-8 character


class UnsupportedSchema(ValueError):
    """`keyword` names what the fence cannot enforce; the server answers 400 naming it."""

    def __init__(self, keyword: str, detail: str):
        super().__init__(f"'{keyword}': {detail}")
        self.keyword = keyword


def value_expr(schema: Any, root: Any = None) -> Expr:
    """The expression for one JSON value valid under `schema` (a dict or a boolean schema);
    `$ref`s resolve in `root` (default: the schema itself)."""
    return _Compiler(schema if root is None else root).value(schema, ())


def raw_string_expr(schema: dict) -> Expr:
    """A string valid under a `"type": "string"` schema as its characters, unquoted and
    unescaped: how GLM and DSML print string parameters between their tags."""
    unknown = sorted(set(schema) - RAW_STRING - ANNOTATIONS)
    if unknown:
        raise UnsupportedSchema(unknown[0], "is not supported on a string parameter")
    if "const" in schema or "enum" in schema:
        return alt(*(Lit(v.encode()) for v in literal_values(schema) if isinstance(v, str)))
    return _string_body(schema, RAW_CHAR, lambda c: Lit(c.encode()))


class _Compiler:
    def __init__(self, root: Any):
        self.root = root

    def value(self, s: Any, refs: tuple[str, ...]) -> Expr:
        if s is True or s == {}:
            return free_value(FREE_DEPTH)
        if s is False:
            raise UnsupportedSchema("false", "a schema that accepts nothing")
        if not isinstance(s, dict):
            raise UnsupportedSchema("schema", f"must be an object, got {type(s).__name__}")
        unknown = sorted(set(s) - HANDLED - ANNOTATIONS)
        if unknown:
            raise UnsupportedSchema(unknown[0], "this keyword is not supported by the token fence")
        if "$ref" in s:
            target = self._resolve(s["$ref"], refs)
            siblings = {k: v for k, v in s.items() if k != "$ref"}
            return self.value(_merged(target, siblings) if siblings else target, refs + (s["$ref"],))
        if "allOf" in s:
            return self._all_of(s, refs)
        if "const" in s or "enum" in s:
            return _literals(s)
        for key in ("anyOf", "oneOf"):
            if key in s:
                base = {k: v for k, v in s.items() if k != key}
                return alt(*(self.value(_merged(base, branch) if isinstance(branch, dict) else branch, refs)
                             for branch in s[key]))
        types = s.get("type")
        if types is None:
            types = _implied_types(s)
        if isinstance(types, list):
            return alt(*(self._typed(t, s, refs) for t in types))
        return self._typed(types, s, refs)

    def _typed(self, t: str | None, s: dict, refs: tuple[str, ...]) -> Expr:
        if t is None:
            return free_value(FREE_DEPTH)
        if t == "string":
            return _string(s)
        if t == "integer":
            return _integer(s)
        if t == "number":
            return _number(s)
        if t == "boolean":
            return alt(Lit(b"true"), Lit(b"false"))
        if t == "null":
            return Lit(b"null")
        if t == "array":
            return self._array(s, refs)
        if t == "object":
            return self._object(s, refs)
        raise UnsupportedSchema("type", f"unknown type {t!r}")

    def _array(self, s: dict, refs: tuple[str, ...]) -> Expr:
        item = self.value(s.get("items", True), refs)
        lo = int(s.get("minItems", 0))
        if lo > ITEMS_CAP:
            raise UnsupportedSchema("minItems", f"above {ITEMS_CAP} is not supported")
        hi = s.get("maxItems")
        hi = min(int(hi), max(lo, ITEMS_CAP)) if hi is not None else None
        if hi is not None and hi < lo:
            raise UnsupportedSchema("maxItems", "is below minItems")
        more = Repeat(seq(Lit(b", "), item), max(lo - 1, 0), None if hi is None else max(hi - 1, 0))
        items = seq(item, more)
        body = items if lo > 0 else (EMPTY if hi == 0 else opt(items))
        return seq(Lit(b"["), body, Lit(b"]"))

    def _object(self, s: dict, refs: tuple[str, ...]) -> Expr:
        props = s.get("properties")
        required = list(s.get("required", []))
        if props is None:
            if required:
                raise UnsupportedSchema("required", "names properties the schema does not define")
            return free_object(FREE_DEPTH)
        missing = [r for r in required if r not in props]
        if missing:
            raise UnsupportedSchema("required", f"names '{missing[0]}', which is not in properties")
        names = _allowed_names(s, props, required)
        members = [(seq(_literal(name), Lit(b": "), self.value(props[name], refs)), name in required)
                   for name in names]
        return seq(Lit(b"{"), ordered_members(members, b", "), Lit(b"}"))

    def _all_of(self, s: dict, refs: tuple[str, ...]) -> Expr:
        branches = s["allOf"]
        if len(branches) != 1 or not isinstance(branches[0], dict):
            raise UnsupportedSchema("allOf", "only a single-branch allOf is supported")
        return self.value(_merged({k: v for k, v in s.items() if k != "allOf"}, branches[0]), refs)

    def _resolve(self, ref: str, seen: tuple[str, ...]) -> Any:
        if ref in seen:
            raise UnsupportedSchema("$ref", f"'{ref}' is recursive")
        if not ref.startswith("#"):
            raise UnsupportedSchema("$ref", f"'{ref}': only references inside the schema are supported")
        node = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise UnsupportedSchema("$ref", f"'{ref}' does not resolve")
            node = node[part]
        return node


def _merged(base: dict, branch: dict) -> dict:
    """A branch of anyOf/oneOf/allOf (or a $ref target) with the keywords beside it: both must
    hold. Properties and required lists combine; any other keyword both give must agree."""
    out = dict(base)
    for key, value in branch.items():
        if key == "properties" and isinstance(out.get(key), dict) and isinstance(value, dict):
            clash = [k for k in value if k in out[key] and out[key][k] != value[k]]
            if clash:
                raise UnsupportedSchema("properties", f"'{clash[0]}' is defined twice, differently")
            out[key] = {**out[key], **value}
        elif key == "required" and key in out:
            out[key] = list(dict.fromkeys([*out[key], *value]))
        elif key in out and out[key] != value and key not in ANNOTATIONS:
            raise UnsupportedSchema(key, "given both beside and inside a subschema, differently")
        else:
            out[key] = value
    return out


def _literals(s: dict) -> Expr:
    """enum/const: the values that satisfy every keyword beside them, in json.dumps' spelling."""
    return alt(*(_literal(v) for v in literal_values(s)))


def literal_values(s: dict) -> list[Any]:
    """The enum/const values that satisfy every keyword beside them."""
    values = [s["const"]] if "const" in s else list(s["enum"])
    rest = {k: v for k, v in s.items() if k not in ("const", "enum")}
    validator = Draft202012Validator(rest) if rest else None
    kept = [v for v in values if validator is None or validator.is_valid(v)]
    if not kept:
        raise UnsupportedSchema("enum" if "enum" in s else "const", "no listed value satisfies the schema")
    return kept


def _allowed_names(s: dict, props: dict, required: list[str]) -> list[str]:
    """The declared properties `propertyNames` admits (a required one it refuses is an error)."""
    names = list(props)
    if "propertyNames" not in s:
        return names
    validator = Draft202012Validator(s["propertyNames"])
    refused = [n for n in names if not validator.is_valid(n)]
    if any(n in required for n in refused):
        raise UnsupportedSchema("propertyNames", f"refuses the required property '{refused[0]}'")
    return [n for n in names if n not in refused]


def ordered_members(members: list[tuple[Expr, bool]], sep: bytes) -> Expr:
    """Members (expression, required) in order, each at most once, optional ones skippable,
    required ones always, joined by `sep` (none leading)."""
    def after(i: int) -> Expr:  # once one member is written, each later one comes with its separator
        return seq(*(seq(Lit(sep), m) if req else opt(seq(Lit(sep), m)) for m, req in members[i:]))

    firsts = []
    for k, (m, req) in enumerate(members):
        firsts.append(seq(m, after(k + 1)))
        if req:
            break
    else:
        firsts.append(EMPTY)  # every member optional: `{}` too
    return alt(*firsts)


def _implied_types(s: dict) -> str | None:
    if "properties" in s or "required" in s:
        return "object"
    if "items" in s:
        return "array"
    return None


def _literal(value: Any) -> Lit:
    return Lit(json.dumps(value, ensure_ascii=False).encode())


def string_char() -> Expr:
    """One character of a JSON string as json.dumps writes it: raw UTF-8 (well formed), or an
    escape for `"`, `\\` and control characters."""
    return alt(json_char_raw(), _escape())


def json_char_raw() -> Expr:
    ascii_ok = one_of(b for b in range(0x20, 0x80) if b not in (0x22, 0x5C))
    return alt(ascii_ok, utf8_multibyte())


def _escape() -> Expr:
    named = (b'\\"', b"\\\\", b"\\n", b"\\r", b"\\t", b"\\b", b"\\f")
    return alt(*(Lit(e) for e in named), _control_escapes())


def _control_escapes() -> Expr:
    """`\\u00XX` for the control characters json.dumps does not name."""
    named = {0x08, 0x09, 0x0A, 0x0C, 0x0D}
    return alt(*(Lit(f"\\u{c:04x}".encode()) for c in range(0x20) if c not in named))


def _string(s: dict) -> Expr:
    return seq(Lit(b'"'), _string_body(s, string_char(), json_char), Lit(b'"'))


def _string_body(s: dict, char: Expr, encode: Callable[[str], Expr]) -> Expr:
    """The characters of a string under `s`: each `char`, a pattern's literals as `encode` spells them."""
    lo, hi = int(s.get("minLength", 0)), s.get("maxLength")
    if lo > LENGTH_CAP:
        raise UnsupportedSchema("minLength", f"above {LENGTH_CAP} is not supported")
    hi = None if hi is None else min(int(hi), max(lo, LENGTH_CAP))
    if hi is not None and hi < lo:
        raise UnsupportedSchema("maxLength", "is below minLength")
    if "pattern" in s:
        if "minLength" in s or "maxLength" in s:
            raise UnsupportedSchema("pattern", "together with minLength/maxLength is not supported")
        try:
            return compile_pattern(s["pattern"], char, encode)
        except RegexError as exc:
            raise UnsupportedSchema("pattern", str(exc)) from None
    return Repeat(char, lo, hi)


def _bounds(s: dict) -> tuple[int | None, int | None]:
    """Integer bounds from minimum/maximum and their exclusive forms (draft 6+ numbers, or
    draft 4 booleans)."""
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        value = s.get(key)
        if value is not None and not isinstance(value, bool) and not (
                isinstance(value, (int, float)) and math.isfinite(value)):
            raise UnsupportedSchema(key, f"must be a finite number, got {value!r}")
    lo = hi = None
    for key, value in (("minimum", s.get("minimum")), ("exclusiveMinimum", s.get("exclusiveMinimum"))):
        if isinstance(value, bool):
            if value and s.get("minimum") is not None:
                lo = math.floor(s["minimum"]) + 1
            continue
        if value is not None:
            bound = math.floor(value) + 1 if key == "exclusiveMinimum" else math.ceil(value)
            lo = bound if lo is None else max(lo, bound)
    for key, value in (("maximum", s.get("maximum")), ("exclusiveMaximum", s.get("exclusiveMaximum"))):
        if isinstance(value, bool):
            if value and s.get("maximum") is not None:
                hi = math.ceil(s["maximum"]) - 1
            continue
        if value is not None:
            bound = math.ceil(value) - 1 if key == "exclusiveMaximum" else math.floor(value)
            hi = bound if hi is None else min(hi, bound)
    if lo is not None and hi is not None and lo > hi:
        raise UnsupportedSchema("minimum", "no integer lies within the bounds")
    return lo, hi


def _integer(s: dict) -> Expr:
    lo, hi = _bounds(s)
    return integer_range(lo, hi)


def _number(s: dict) -> Expr:
    if any(k in s for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        return _integer(s)
    digits = Repeat(DIGIT, 1, None)
    fraction = opt(seq(Lit(b"."), digits))
    # Two exponent digits: 1e99 is still a float everywhere, 1e999 reads back as infinity.
    exponent = opt(seq(one_of(b"eE"), opt(one_of(b"+-")), Repeat(DIGIT, 1, 2)))
    return seq(integer_range(None, None), fraction, exponent)


def integer_range(lo: int | None, hi: int | None) -> Expr:
    """Canonical decimal integers n with lo <= n <= hi (None: unbounded)."""
    parts = []
    if lo is None or lo < 0:  # negatives: -|n| with |n| in [max(1, -hi), -lo]
        top = None if lo is None else -lo
        bottom = 1 if hi is None or hi >= 0 else -hi
        if top is None or top >= bottom:
            parts.append(seq(Lit(b"-"), _naturals(bottom, top)))
    if hi is None or hi >= 0:
        parts.append(_naturals(max(lo or 0, 0), hi))
    return alt(*parts)


def _naturals(lo: int, hi: int | None) -> Expr:
    """Decimal naturals without leading zeros in [lo, hi]."""
    options = []
    if lo == 0:
        options.append(Lit(b"0"))
        lo = 1
    top_len = len(str(hi)) if hi is not None else len(str(lo))
    for length in range(len(str(lo)), top_len + 1):
        a = max(lo, 10 ** (length - 1))
        b = 10 ** length - 1 if hi is None else min(hi, 10 ** length - 1)
        if a <= b:
            options.append(_fixed_range(str(a), str(b)))
    if hi is None:  # every longer natural
        options.append(seq(NONZERO, Repeat(DIGIT, top_len, None)))
    return alt(*options)


def _fixed_range(a: str, b: str) -> Expr:
    """Digit strings of one length between a and b inclusive."""
    if not a:
        return EMPTY
    if a[0] == b[0]:
        return seq(Lit(a[0].encode()), _fixed_range(a[1:], b[1:]))
    rest = len(a) - 1
    low = seq(Lit(a[0].encode()), _fixed_range(a[1:], "9" * rest))
    high = seq(Lit(b[0].encode()), _fixed_range("0" * rest, b[1:]))
    options = [low]
    if int(b[0]) - int(a[0]) > 1:
        options.append(seq(byte_range(ord(a[0]) + 1, ord(b[0]) - 1), Repeat(DIGIT, rest, rest)))
    options.append(high)
    return alt(*options)


def free_value(depth: int) -> Expr:
    """Any JSON value nesting at most `depth` arrays/objects deep."""
    scalars = [seq(Lit(b'"'), Repeat(string_char()), Lit(b'"')), _number({}), Lit(b"true"),
               Lit(b"false"), Lit(b"null")]
    if depth == 0:
        return alt(*scalars)
    inner = free_value(depth - 1)
    array = seq(Lit(b"["), opt(seq(inner, Repeat(seq(Lit(b", "), inner)))), Lit(b"]"))
    return alt(*scalars, array, free_object(depth))


def free_object(depth: int) -> Expr:
    inner = free_value(depth - 1) if depth > 0 else alt(Lit(b"null"))
    member = seq(Lit(b'"'), Repeat(string_char()), Lit(b'"'), Lit(b": "), inner)
    return seq(Lit(b"{"), opt(seq(member, Repeat(seq(Lit(b", "), member)))), Lit(b"}"))
