"""What a fenced generation may say, per dialect and tool_choice, as one byte expression.

The grammar spells calls exactly as the dialect's `render_tool_calls` does, so the parser reads
back what the fence allowed and a call echoed in the next prompt renders the same bytes. The
tool_choice modes:
- none: free text in which the call trigger never completes;
- auto: free text until the trigger, then calls; the branches of every declared tool advance
  together (the DFA of their union), and a branch dies when a token leaves it;
- required / named: calls from the first token (after the reasoning, when the prompt opened one).
`parallel=False` allows one call.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from zllm_core.dialects.conversation import FunctionTool
from zllm_core.dialects.dialect import ToolDialect
from zllm_core.dialects.hermes import CALL_CLOSE, CALL_OPEN
from zllm_core.dialects.scanner import Markers
from zllm_core.dialects.selection import DIALECTS
from zllm_core.dialects.stream import THINK_CLOSE, THINK_OPEN
from zllm_core.fence.automaton import EMPTY, Compact, Expr, Lit, Repeat, Text, alt, seq
from zllm_core.fence.grammar import FenceError, FenceVocab
from zllm_core.fence.json_schema import value_expr
from zllm_core.fence.param_calls import DSML_TAGS, GLM_TAGS, dsml_calls, glm_calls, stop_bytes
from zllm_core.protocols.canonical import ToolChoice

# Tags each dialect's fence may place; their special tokens (where the vocabulary has them)
# become pseudo bytes of the grammar.
HERMES_TAGS = (CALL_OPEN, CALL_CLOSE, THINK_OPEN, THINK_CLOSE)


def hermes_calls(dialect: ToolDialect, vocab: FenceVocab, tools: Sequence[FunctionTool], parallel: bool) -> Expr:
    """`<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>`, joined by newlines."""
    one = alt(*(seq(vocab.tag(CALL_OPEN), Lit(f'\n{{"name": "{t.name}", "arguments": '.encode()),
                    Compact(value_expr(t.parameters or {"type": "object"})), Lit(b"}\n"), vocab.tag(CALL_CLOSE))
                for t in tools))
    return seq(one, Repeat(seq(Lit(b"\n"), one)) if parallel else EMPTY)


class DialectGrammar(NamedTuple):
    calls: Callable[[ToolDialect, FenceVocab, Sequence[FunctionTool], bool], Expr]
    tags: tuple[str, ...]
    after_reasoning: bytes  # what the dialect renders between `</think>` and what follows


DIALECT_GRAMMARS = {
    "hermes": DialectGrammar(hermes_calls, HERMES_TAGS, b"\n\n"),
    "glm45": DialectGrammar(glm_calls, GLM_TAGS, b""),
    "glm47": DialectGrammar(glm_calls, GLM_TAGS, b""),
    "dsml": DialectGrammar(dsml_calls, DSML_TAGS, b""),
}


def tags_for(dialect: str) -> tuple[str, ...]:
    return DIALECT_GRAMMARS[dialect].tags if dialect in DIALECT_GRAMMARS else ()


def output_grammar(dialect: str, vocab: FenceVocab, tools: Sequence[FunctionTool], choice: ToolChoice,
                   in_reasoning: bool) -> Expr:
    """The whole output of a turn under `choice`."""
    if dialect not in DIALECT_GRAMMARS:
        raise FenceError(f"tool_choice '{choice.mode}' is not enforced for the {dialect} dialect yet")
    grammar, syntax = DIALECT_GRAMMARS[dialect], DIALECTS[dialect]
    for literal in (*grammar.tags, *(t.name for t in tools)):  # what the fence forces must be spellable
        vocab.verify(literal.encode())
    text = Text(_avoided(vocab, syntax.text_stops))
    if choice.mode == "none" or not tools:
        body = text
    else:
        chosen = [t for t in tools if choice.mode != "named" or t.name == choice.name]
        calls = grammar.calls(syntax, vocab, chosen, choice.parallel)
        body = calls if choice.mode in ("required", "named") else seq(text, alt(calls, EMPTY))
    return seq(reasoning_prefix(dialect, vocab), body) if in_reasoning else body


def json_grammar(schema: dict | None, in_reasoning: bool, vocab: FenceVocab, dialect: str = "hermes") -> Expr:
    """response_format: one JSON value (an object for json_object) and nothing else."""
    body = value_expr(schema if schema is not None else {"type": "object"})
    return seq(reasoning_prefix(dialect, vocab), body) if in_reasoning else body


def reasoning_prefix(dialect: str, vocab: FenceVocab) -> Expr:
    """The rest of an open reasoning block, as the dialect renders it (Hermes: `...\\n</think>\\n\\n`)."""
    after = DIALECT_GRAMMARS[dialect].after_reasoning if dialect in DIALECT_GRAMMARS else b""
    ends = DIALECTS[dialect].parser_class.reasoning_end
    return seq(Text(_avoided(vocab, ends)), vocab.tag(THINK_CLOSE), Lit(after))


def _avoided(vocab: FenceVocab, markers: Markers) -> tuple[bytes, ...]:
    """What text must not contain to stay text: every spelling of the markers, and the pseudo
    byte of each tag token that spells one."""
    tokens = tuple(bytes((b,)) for tag, b in vocab.pseudo.items() if markers.scan(tag, True)[1] is not None)
    return stop_bytes(markers) + tokens
