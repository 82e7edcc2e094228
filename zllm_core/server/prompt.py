"""From a canonical request to the exact prompt token ids, and the parser for what comes back.

Every protocol's request and count_tokens go through `PromptBuilder.build`, so the tokens
counted are the tokens the model sees, and the same conversation yields the same ids whichever
protocol carried it. `build` names the request's conversation and files what it keeps for it
(memo, render, tokenizer session) with the conversation clock, which releases all of a
conversation's state together under one budget in bytes (conversation_clock.py).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import jinja2
import numpy as np

from zllm_core.conversation_clock import ConversationClock, Held
from zllm_core.dialects import ChatTemplate, DsmlPrompt, StreamParser, prompt_for
from zllm_core.dialects.incremental_render import IncrementalRenderer, Rendered
from zllm_core.fence.grammar import FenceVocab
from zllm_core.protocols.canonical import CanonicalRequest, RequestError
from zllm_core.rope import Text, flat
from zllm_core.tokenizer.conversation import ConversationIds, ConversationTokenizer
from zllm_core.tokenizer.incremental import IncrementalTokenizer

CONVERSATION_BYTES = 1 << 30  # default budget of what the server keeps for conversations


@dataclass(frozen=True)
class Prompt:
    text: Text  # a rope over the previous prompt when the conversation continues it
    ids: ConversationIds  # the token ids with their conversation, where the generation is recorded
    in_reasoning: bool  # the generation prompt ends inside an open reasoning block

    @property
    def token_ids(self) -> np.ndarray:
        """uint32, read-only: later requests never change it."""
        return self.ids.ids

    @property
    def conversation(self) -> str:
        """One identity for the tokenizer session, exact spans and the cache's hint."""
        return self.ids.conversation


class PromptBuilder:
    """Renders with the model's template and tokenizes, both incrementally: a conversation that
    resends its whole context costs its new messages and text plus a window, not the context."""

    def __init__(self, template: ChatTemplate | DsmlPrompt, tokenizer: Any,
                 conversation_bytes: int = CONVERSATION_BYTES):
        """`conversation_bytes` bounds what is kept for conversations, least recently used
        released whole. The renderer's and tokenizer's own bounds stay as safety caps at the
        same size: they keep a request's state before its conversation is known."""
        self.template = template
        self.clock = ConversationClock(conversation_bytes)
        self.renderer = IncrementalRenderer(template, budget_bytes=conversation_bytes)
        self.tokens = IncrementalTokenizer(tokenizer, budget_bytes=conversation_bytes, allowed_special="all")
        self.conversations = ConversationTokenizer(self.tokens)

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, tokenizer: Any, dialect: str | None = None,
                       conversation_bytes: int = CONVERSATION_BYTES) -> "PromptBuilder":
        """`dialect` overrides the one the model's template (or config) names."""
        return cls(prompt_for(model_dir, dialect), tokenizer, conversation_bytes)

    def metrics(self) -> dict[str, float]:
        rendered = {f"render_{k}": v for k, v in vars(self.renderer.stats).items()}
        clock = {f"conversation_{k}": v for k, v in vars(self.clock.stats).items()}
        return {**self.tokens.metrics(), **self.conversations.metrics(), **rendered, **clock}

    def token_bytes(self, token_id: int) -> bytes:
        return self.tokens.tokenizer.token_bytes(token_id)

    @property
    def dialect(self) -> str:
        return self.template.dialect.name

    def fence_vocab(self, end_ids: Sequence[int], tags: Sequence[str]) -> FenceVocab:
        """What this tokenizer's fences walk over; `end_ids` end a turn (the model's EOS)."""
        return FenceVocab.for_tokenizer(self.tokens.tokenizer, end_ids, tags)

    def render(self, req: CanonicalRequest, scope: str = "") -> str:
        """The prompt text exactly as the model's template renders the request."""
        return flat(self._rendered(req, scope).text)

    def _rendered(self, req: CanonicalRequest, scope: str) -> Rendered:
        extra = {} if req.thinking is None else {"enable_thinking": req.thinking}
        try:
            return self.renderer.render(req.messages, req.tools, scope, **extra)
        except jinja2.exceptions.TemplateError as exc:
            # The template's raise_exception refuses a conversation the model cannot take
            # (roles out of order, no user turn): the client's request, not our failure.
            raise RequestError(f"the model's chat template rejected the conversation: {exc}",
                               param="messages") from None

    def build(self, req: CanonicalRequest, scope: str = "") -> Prompt:
        """`scope` (the tenant) keeps tokenizer sessions apart like the prefix cache's."""
        rendered = self._rendered(req, scope)
        text = rendered.text
        # The cache key (prompt_cache_key, a response chain) finds the conversation directly;
        # without one the longest stored text prefix does. Its recorded ids are reused where
        # the text is resent verbatim; the rest equals a full encode.
        ids = self.conversations.encode(text, scope, key=req.cache_key, prefix=rendered.prefix)
        self.clock.touch((scope, ids.conversation), self._held(req, rendered, ids.session))
        return Prompt(text, ids, self.template.dialect.starts_in_reasoning(text))

    def record(self, prompt: Prompt, generated: np.ndarray, scope: str = "") -> None:
        """The ids the model generated for `prompt`, kept for the conversation's next turn."""
        self.conversations.record(prompt.ids, prompt.text, generated)
        session = self.tokens.held(prompt.ids.session)  # it grew by the answer's span
        if session is not None:
            self.hold(prompt, scope, session)

    def _held(self, req: CanonicalRequest, rendered: Rendered, session: int) -> list[Held]:
        """What the request keeps for its conversation: the memo's entries, the render, the
        tokenizer session."""
        held = [*req.held, self.tokens.held(session)]
        if rendered.state is not None:
            held.append(self.renderer.held(rendered.state))
        return [h for h in held if h is not None]

    def hold(self, prompt: Prompt, scope: str, held: Held) -> None:
        """Files `held` (a state kept after the prompt was built) with the prompt's conversation."""
        self.clock.hold((scope, prompt.conversation), held)

    @contextlib.contextmanager
    def in_use(self, prompt: Prompt, scope: str) -> Iterator[None]:
        """The prompt's conversation is not evicted while the block runs (its generation)."""
        with self.clock.in_use((scope, prompt.conversation)):
            yield

    def parser(self, req: CanonicalRequest, prompt: Prompt, scope: str) -> StreamParser:
        """An incremental parser splitting output text into text, reasoning and tool-call events."""
        return self.template.dialect.stream_parser(scope, req.tools, prompt.in_reasoning)
