"""Fences for requests: one per tokenizer and dialect, compiling each distinct grammar once.

Agents send the same tools on every call, so a tool set's grammar is compiled on its first
request and then shared; each request gets its own `TokenFence` (its position and budget).

What a request forces (tool_choice required or named, a JSON response format) is compiled
before it runs, and a schema the fence cannot enforce is the client's error. `auto` only
guards what the model chooses to do: its grammar compiles in the background (a large tool set
takes seconds), requests run unfenced until it is ready, and a tool set the fence cannot
express stays unfenced (logged once) rather than failing an agent's every call.
"""
from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from typing import Callable, Sequence

from zllm_core.dialects.conversation import FunctionTool
from zllm_core.fence.automaton import Expr
from zllm_core.fence.grammar import FenceVocab, Grammar
from zllm_core.fence.guard import GenerationGuard, GuardConfig
from zllm_core.fence.token_fence import TokenFence
from zllm_core.fence.tool_grammar import json_grammar, output_grammar, tags_for
from zllm_core.protocols.canonical import ResponseFormat, ToolChoice

GRAMMAR_CACHE = 16  # each holds up to ROW_CACHE rows (~20 MB for a 150K vocabulary)
log = logging.getLogger("zllm.fence")


class FenceFactory:
    def __init__(self, dialect: str, vocab: Callable[[Sequence[str]], FenceVocab]):
        """`vocab(tags)` builds the tokenizer's FenceVocab; it is called once, on first use."""
        self.dialect = dialect
        self._make_vocab = vocab
        self._vocab: FenceVocab | None = None
        self._grammars: OrderedDict[str, Grammar | None] = OrderedDict()  # None: cannot be fenced
        self._compiling: set[str] = set()
        self._lock = threading.Lock()

    @property
    def vocab(self) -> FenceVocab:
        with self._lock:
            if self._vocab is None:
                self._vocab = self._make_vocab(tags_for(self.dialect))
            return self._vocab

    def for_request(self, tools: Sequence[FunctionTool], choice: ToolChoice,
                    response_format: ResponseFormat | None, in_reasoning: bool,
                    max_tokens: int, guard: GuardConfig | None = None) -> TokenFence | None:
        """None where nothing is constrained: no tools, no JSON format and no loop guard."""
        grammar = self._grammar_for(tools, choice, response_format, in_reasoning)
        if grammar is None and guard is None:
            return None
        vocab = self.vocab
        return TokenFence(grammar, max_tokens, None if guard is None else GenerationGuard(guard),
                          vocab.vocab_size, vocab.end_ids)

    def _grammar_for(self, tools: Sequence[FunctionTool], choice: ToolChoice,
                     response_format: ResponseFormat | None, in_reasoning: bool) -> Grammar | None:
        if response_format is not None:
            key = json.dumps(["json", response_format.schema, in_reasoning], sort_keys=True)
            build = lambda v: json_grammar(response_format.schema, in_reasoning, v, self.dialect)  # noqa: E731
        elif tools:
            key = json.dumps(["tools", [(t.name, t.parameters) for t in tools], choice.mode, choice.name,
                              choice.parallel, in_reasoning], sort_keys=True)
            build = lambda v: output_grammar(self.dialect, v, tools, choice, in_reasoning)  # noqa: E731
            if choice.mode in ("auto", "none"):
                return self._optional(key, build)
        else:
            return None
        return self._grammar(key, build)

    def _grammar(self, key: str, build: Callable[[FenceVocab], Expr]) -> Grammar:
        with self._lock:
            if key in self._grammars and self._grammars[key] is not None:
                self._grammars.move_to_end(key)
                return self._grammars[key]
        vocab = self.vocab
        grammar = Grammar.compile(build(vocab), vocab)  # outside the lock: compiling takes a while
        self._store(key, grammar)
        threading.Thread(target=grammar.prepare, daemon=True, name="zllm-fence-prepare").start()
        return grammar

    def _optional(self, key: str, build: Callable[[FenceVocab], Expr]) -> Grammar | None:
        """The grammar if it is ready; else None now, and a compile in the background."""
        with self._lock:
            if key in self._grammars:
                self._grammars.move_to_end(key)
                return self._grammars[key]
            if key in self._compiling:
                return None
            self._compiling.add(key)
        threading.Thread(target=self._compile_quietly, args=(key, build), daemon=True,
                         name="zllm-fence-compile").start()
        return None

    def _compile_quietly(self, key: str, build: Callable[[FenceVocab], Expr]) -> None:
        try:
            vocab = self.vocab
            grammar = Grammar.compile(build(vocab), vocab)
        except (ValueError, RecursionError) as exc:  # FenceError, UnsupportedSchema, too deep
            log.warning("tool_choice auto stays unfenced for this tool set: %s", exc)
            grammar = None
        self._store(key, grammar)
        if grammar is not None:
            grammar.prepare()

    def _store(self, key: str, grammar: Grammar | None) -> None:
        with self._lock:
            self._compiling.discard(key)
            self._grammars[key] = grammar
            while len(self._grammars) > GRAMMAR_CACHE:
                self._grammars.popitem(last=False)
