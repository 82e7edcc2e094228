"""What renders a model's prompts: its chat template, or the DSML encoder where a model ships none."""
from __future__ import annotations

from pathlib import Path

from .chat_template import ChatTemplate
from .dsml_prompt import DsmlPrompt
from .selection import dialect_for
from .template_files import read_template


def prompt_for(model_dir: str | Path, explicit: str | None = None) -> ChatTemplate | DsmlPrompt:
    """What renders this model's prompts: its chat template, or for DeepSeek-V3.2 (which ships
    none) the reference encoder's layout. Both offer `.dialect` and `.render(messages, tools, ...)`."""
    dialect = dialect_for(model_dir, explicit)
    if dialect.name == "dsml" and read_template(Path(model_dir)) is None:
        return DsmlPrompt(dialect)
    return ChatTemplate.from_model_dir(model_dir, dialect)
