"""From a canonical request to the exact prompt token ids, and the parser for what comes back.

Every protocol's request and count_tokens go through `PromptBuilder.build`, so the tokens
counted are the tokens the model sees, and the same conversation yields the same ids whichever
protocol carried it.
"""
from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zllm_core.dialects import ChatTemplate, StreamParser, dialect_for
from zllm_core.dialects.chat_template import special_tokens
from zllm_core.protocols.canonical import CanonicalRequest

# Checkpoints that ship no template of their own (zllm-demo) get their family's official one.
PACKAGED_TEMPLATES = {"qwen2": "qwen3.jinja", "qwen3": "qwen3.jinja"}


@dataclass(frozen=True)
class Prompt:
    text: str
    token_ids: list[int]
    in_reasoning: bool  # the generation prompt ends inside an open reasoning block


class PromptBuilder:
    def __init__(self, template: ChatTemplate, tokenizer: Any):
        self.template, self.tokenizer = template, tokenizer

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, tokenizer: Any) -> "PromptBuilder":
        return cls(load_template(Path(model_dir)), tokenizer)

    def render(self, req: CanonicalRequest) -> str:
        extra = {} if req.thinking is None else {"enable_thinking": req.thinking}
        return self.template.render(req.messages, req.tools, add_generation_prompt=True, **extra)

    def build(self, req: CanonicalRequest) -> Prompt:
        text = self.render(req)
        return Prompt(text, self.tokenizer.encode(text, allowed_special="all"),
                      self.template.dialect.starts_in_reasoning(text))

    def parser(self, req: CanonicalRequest, prompt: Prompt, scope: str) -> StreamParser:
        """An incremental parser splitting output text into text, reasoning and tool-call events."""
        return self.template.dialect.stream_parser(scope, req.tools, prompt.in_reasoning)


def load_template(model_dir: Path) -> ChatTemplate:
    try:
        return ChatTemplate.from_model_dir(model_dir)
    except FileNotFoundError:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        name = PACKAGED_TEMPLATES.get(config.get("model_type", ""))
        if name is None:
            raise
    source = (importlib.resources.files("zllm_core.dialects") / "templates" / name).read_text("utf-8")
    tokenizer_config = model_dir / "tokenizer_config.json"
    tokens = json.loads(tokenizer_config.read_text("utf-8")) if tokenizer_config.is_file() else {}
    return ChatTemplate(source, dialect_for(model_dir), special_tokens(tokens))
