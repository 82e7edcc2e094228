"""GLM XML and DeepSeek DSML tool calls as byte expressions: one tagged value per parameter.

Spelled as the dialects' `render_tool_calls` print them (GLM: `<tool_call>name<arg_key>k</arg_key>
<arg_value>v</arg_value></tool_call>`, with a newline after the name and after each tag pair in
GLM-4.5/4.6; DSML: one `function_calls` block of `invoke`s), so their parsers read back what the
fence allowed. Parameters come in declaration order, each at most once, required ones always.
A value is spelled the way its parser reads it: raw text for a string (GLM: a parameter the schema
types "string"; DSML: `string="true"`), JSON otherwise; neither may contain the value's closing
tag in any spelling the parser takes (`value_end`). Not generated: a string holding its own
closing tag (the dialects print such a value as escaped JSON), and in GLM, strings inside
`anyOf` or a type list spelled raw (they come as JSON, which GLM's parser reads exactly but
renders raw; raw, a string such as `12` would read back as a number). DSML's `string="true"`
takes them raw.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from zllm_core.dialects.conversation import FunctionTool
from zllm_core.dialects.dsml import (CALLS_CLOSE, CALLS_OPEN, INVOKE_CLOSE, INVOKE_OPEN, PARAM_CLOSE, PARAM_OPEN,
                                     TAG_END, DsmlDialect)
from zllm_core.dialects.glm import CALL_CLOSE, CALL_OPEN, KEY_CLOSE, KEY_OPEN, VALUE_CLOSE, VALUE_OPEN, GlmDialect
from zllm_core.dialects.json_args import is_json
from zllm_core.dialects.scanner import Markers
from zllm_core.dialects.stream import THINK_CLOSE, THINK_OPEN
from zllm_core.fence.automaton import EMPTY, Avoid, Expr, Lit, Repeat, alt, seq
from zllm_core.fence.grammar import FenceError, FenceVocab
from zllm_core.fence.json_schema import (ANNOTATIONS, RAW_STRING, UnsupportedSchema, literal_values,
                                         ordered_members, raw_string_expr, value_expr)

GLM_TAGS = (CALL_OPEN, CALL_CLOSE, KEY_OPEN, KEY_CLOSE, VALUE_OPEN, VALUE_CLOSE, THINK_OPEN, THINK_CLOSE)
DSML_TAGS = (CALLS_OPEN, CALLS_CLOSE, INVOKE_OPEN, INVOKE_CLOSE, PARAM_OPEN, PARAM_CLOSE, THINK_OPEN, THINK_CLOSE)
TOP_LEVEL = {"type", "properties", "required", "additionalProperties", "$defs", "definitions"}

Member = Callable[[FunctionTool, str, Any], Expr]


def glm_calls(dialect: GlmDialect, vocab: FenceVocab, tools: Sequence[FunctionTool], parallel: bool) -> Expr:
    """`<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>`, back to back."""
    nl = Lit(dialect.newline.encode())
    stops = stop_bytes(dialect.parser_class.value_end)

    def pair(tool: FunctionTool, key: str, schema: Any) -> Expr:
        raw, json_ = _spellings(tool, key, schema, raw_ok=_reads_raw)
        return seq(vocab.tag(KEY_OPEN), Lit(key.encode()), vocab.tag(KEY_CLOSE), nl, vocab.tag(VALUE_OPEN),
                   Avoid(alt(*(e for e in (raw, json_) if e is not None)), stops), vocab.tag(VALUE_CLOSE), nl)

    one = alt(*(seq(nl, vocab.tag(CALL_OPEN), Lit(t.name.encode()), nl, _params(t, pair, b""), vocab.tag(CALL_CLOSE))
                for t in tools))
    return seq(one, Repeat(one) if parallel else EMPTY)


def dsml_calls(dialect: DsmlDialect, vocab: FenceVocab, tools: Sequence[FunctionTool], parallel: bool) -> Expr:
    """`\\n\\n<｜DSML｜function_calls>\\n` invokes joined by newlines `\\n</｜DSML｜function_calls>`."""
    stops = stop_bytes(dialect.parser_class.value_end)

    def param(tool: FunctionTool, key: str, schema: Any) -> Expr:
        # `string="true"` says the text is a string, so a string alternative is printed raw,
        # as the dialect renders any string value.
        raw, json_ = _spellings(tool, key, schema, raw_ok=lambda _: True, split_strings=True)
        return alt(*(seq(vocab.tag(PARAM_OPEN), Lit(f' name="{key}" string="{kind}"{TAG_END}'.encode()),
                         Avoid(value, stops), vocab.tag(PARAM_CLOSE))
                     for kind, value in (("true", raw), ("false", json_)) if value is not None))

    invoke = alt(*(seq(vocab.tag(INVOKE_OPEN), Lit(f' name="{t.name}"{TAG_END}\n'.encode()), _params(t, param, b"\n"),
                       Lit(b"\n"), vocab.tag(INVOKE_CLOSE)) for t in tools))
    invokes = seq(invoke, Repeat(seq(Lit(b"\n"), invoke)) if parallel else EMPTY)
    return seq(Lit(b"\n\n"), vocab.tag(CALLS_OPEN), Lit(b"\n"), invokes, Lit(b"\n"), vocab.tag(CALLS_CLOSE))


def stop_bytes(markers: Markers) -> tuple[bytes, ...]:
    return tuple(s.encode() for s in markers.spellings())


def _params(tool: FunctionTool, member: Member, sep: bytes) -> Expr:
    """The tool's parameters as members in declaration order, required ones always."""
    schema = tool.parameters or {}
    unknown = sorted(set(schema) - TOP_LEVEL - ANNOTATIONS)
    if unknown:
        raise UnsupportedSchema(unknown[0], "is not supported at the top of a tool's parameters in this dialect")
    props, required = schema.get("properties", {}), list(schema.get("required", []))
    missing = [r for r in required if r not in props]
    if missing:
        raise UnsupportedSchema("required", f"names '{missing[0]}', which is not in properties")
    unprintable = [k for k in props if set(k) & set('<>&"')]
    if unprintable:
        raise FenceError(f"tool {tool.name!r}: the parameter name {unprintable[0]!r} cannot be printed in this dialect")
    return ordered_members([(member(tool, k, s), k in required) for k, s in props.items()], sep)


def _spellings(tool: FunctionTool, key: str, schema: Any, raw_ok: Callable[[str], bool],
               split_strings: bool = False) -> tuple[Expr | None, Expr | None]:
    """(the raw text of the values that are strings, the JSON text of the others); `raw_ok`
    says which string literals the parser reads back as text; `split_strings`, that a string
    alternative of a type list or `anyOf` is read back as text too."""
    if tool.parameter_type(key) == "string":
        return raw_string_expr(schema), None
    if isinstance(schema, dict) and ("enum" in schema or "const" in schema):
        raw, rest = [], []
        for v in literal_values(schema):
            (raw if isinstance(v, str) and raw_ok(v) else rest).append(v)
        return (alt(*(Lit(v.encode()) for v in raw)) if raw else None, value_expr({"enum": rest}) if rest else None)
    strings, others = _string_alternatives(schema) if split_strings else ([], schema)
    return (alt(*map(raw_string_expr, strings)) if strings else None,
            value_expr(others, tool.parameters) if others is not None else None)


def _string_alternatives(schema: Any) -> tuple[list[dict], Any]:
    """(the plain string alternatives of a type list or an `anyOf`/`oneOf`, the schema of the
    other alternatives or None); ([], schema) for any other shape."""
    if not isinstance(schema, dict):
        return [], schema
    extra = set(schema) - ANNOTATIONS
    types = schema.get("type")
    if extra == {"type"} and isinstance(types, list) and "string" in types:
        rest = [t for t in types if t != "string"]
        return [{"type": "string"}], {"type": rest} if rest else None
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if extra == {key} and isinstance(options, list):
            plain = [o for o in options if isinstance(o, dict) and o.get("type") == "string"
                     and set(o) <= RAW_STRING | ANNOTATIONS]
            rest = [o for o in options if not any(o is p for p in plain)]
            return plain, {key: rest} if rest else None
    return [], schema


def _reads_raw(text: str) -> bool:
    """An untyped GLM parameter's text is read as JSON where it parses as JSON, else as a string."""
    return not is_json(text)
