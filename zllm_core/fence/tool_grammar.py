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

from typing import Callable, Sequence

from zllm_core.dialects.conversation import FunctionTool
from zllm_core.dialects.hermes import CALL_CLOSE, CALL_OPEN
from zllm_core.dialects.stream import THINK_CLOSE, THINK_OPEN
from zllm_core.fence.automaton import EMPTY, Expr, Lit, Repeat, Text, alt, seq
from zllm_core.fence.grammar import FenceError, FenceVocab
from zllm_core.fence.json_schema import value_expr
from zllm_core.protocols.canonical import ToolChoice

# Tags each dialect's fence may place; their special tokens (where the vocabulary has them)
# become pseudo bytes of the grammar.
HERMES_TAGS = (CALL_OPEN, CALL_CLOSE, THINK_OPEN, THINK_CLOSE)


def hermes_calls(vocab: FenceVocab, tools: Sequence[FunctionTool], parallel: bool) -> Expr:
    """`<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>`, joined by newlines."""
    one = alt(*(seq(vocab.tag(CALL_OPEN), Lit(f'\n{{"name": "{t.name}", "arguments": '.encode()),
                    value_expr(t.parameters or {"type": "object"}), Lit(b"}\n"), vocab.tag(CALL_CLOSE))
                for t in tools))
    return seq(one, Repeat(seq(Lit(b"\n"), one)) if parallel else EMPTY)


DIALECT_CALLS: dict[str, tuple[Callable[[FenceVocab, Sequence[FunctionTool], bool], Expr], str, tuple[str, ...]]] = {
    "hermes": (hermes_calls, CALL_OPEN, HERMES_TAGS),
}


def tags_for(dialect: str) -> tuple[str, ...]:
    return DIALECT_CALLS[dialect][2] if dialect in DIALECT_CALLS else ()


def output_grammar(dialect: str, vocab: FenceVocab, tools: Sequence[FunctionTool], choice: ToolChoice,
                   in_reasoning: bool) -> Expr:
    """The whole output of a turn under `choice`."""
    if dialect not in DIALECT_CALLS:
        raise FenceError(f"tool_choice '{choice.mode}' is not enforced for the {dialect} dialect yet")
    calls_of, trigger, tags = DIALECT_CALLS[dialect]
    for literal in (*tags, *(t.name for t in tools)):  # what the fence forces must be spellable
        vocab.verify(literal.encode())
    stops = _spellings(vocab, trigger)
    if choice.mode == "none" or not tools:
        body = Text(stops)
    else:
        chosen = [t for t in tools if choice.mode != "named" or t.name == choice.name]
        calls = calls_of(vocab, chosen, choice.parallel)
        body = calls if choice.mode in ("required", "named") else seq(Text(stops), alt(calls, EMPTY))
    return seq(reasoning_prefix(vocab), body) if in_reasoning else body


def json_grammar(schema: dict | None, in_reasoning: bool, vocab: FenceVocab) -> Expr:
    """response_format: one JSON value (an object for json_object) and nothing else."""
    body = value_expr(schema if schema is not None else {"type": "object"})
    return seq(reasoning_prefix(vocab), body) if in_reasoning else body


def reasoning_prefix(vocab: FenceVocab) -> Expr:
    """The rest of an open reasoning block, as the templates render it: `...\\n</think>\\n\\n`."""
    return seq(Text(_spellings(vocab, THINK_CLOSE)), vocab.tag(THINK_CLOSE), Lit(b"\n\n"))


def _spellings(vocab: FenceVocab, tag: str) -> tuple[bytes, ...]:
    spelled = (tag.encode(),)
    return spelled + ((bytes((vocab.pseudo[tag],)),) if tag in vocab.pseudo else ())
