"""From a canonical request to the exact prompt token ids, and the parser for what comes back.

Every protocol's request and count_tokens go through `PromptBuilder.build`, so the tokens
counted are the tokens the model sees, and the same conversation yields the same ids whichever
protocol carried it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import jinja2
import numpy as np

from zllm_core.dialects import ChatTemplate, DsmlPrompt, StreamParser, prompt_for
from zllm_core.dialects.incremental_render import IncrementalRenderer, Rendered
from zllm_core.fence.grammar import FenceVocab
from zllm_core.protocols.canonical import CanonicalRequest, RequestError
from zllm_core.rope import Text, flat
from zllm_core.tokenizer.conversation import ConversationIds, ConversationTokenizer
from zllm_core.tokenizer.incremental import IncrementalTokenizer


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
                 session_budget_bytes: int = 512 << 20):
        self.template = template
        self.renderer = IncrementalRenderer(template)
        self.tokens = IncrementalTokenizer(tokenizer, budget_bytes=session_budget_bytes, allowed_special="all")
        self.conversations = ConversationTokenizer(self.tokens)

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, tokenizer: Any, dialect: str | None = None) -> "PromptBuilder":
        """`dialect` overrides the one the model's template (or config) names."""
        return cls(prompt_for(model_dir, dialect), tokenizer)

    def metrics(self) -> dict[str, float]:
        rendered = {f"render_{k}": v for k, v in vars(self.renderer.stats).items()}
        return {**self.tokens.metrics(), **self.conversations.metrics(), **rendered}

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
        return Prompt(text, ids, self.template.dialect.starts_in_reasoning(text))

    def record(self, prompt: Prompt, generated: np.ndarray) -> None:
        """The ids the model generated for `prompt`, kept for the conversation's next turn."""
        self.conversations.record(prompt.ids, prompt.text, generated)

    def parser(self, req: CanonicalRequest, prompt: Prompt, scope: str) -> StreamParser:
        """An incremental parser splitting output text into text, reasoning and tool-call events."""
        return self.template.dialect.stream_parser(scope, req.tools, prompt.in_reasoning)
