"""Choosing a model's dialect: an explicit option, else its chat template, else its config."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from zllm_core.model.gguf_file import is_gguf, open_gguf

from .dialect import ToolDialect
from .dsml import DSML, DsmlDialect
from .glm import GlmDialect
from .hermes import HermesDialect
from .template_files import read_template

DIALECTS: dict[str, ToolDialect] = {d.name: d for d in (HermesDialect(), GlmDialect(True), GlmDialect(False), DsmlDialect())}
ALIASES = {"chatml": "hermes", "qwen": "hermes", "qwen2": "hermes", "qwen3": "hermes",
           "glm": "glm45", "glm46": "glm45", "deepseek": "dsml", "deepseek_v32": "dsml"}


def dialect_named(name: str) -> ToolDialect:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in DIALECTS:
        raise ValueError(f"unknown tool dialect {name!r}; known: {sorted(DIALECTS)}")
    return DIALECTS[key]


def dialect_for(source: str | Path | Mapping[str, Any], explicit: str | None = None) -> ToolDialect:
    """`source` is a model directory or its parsed config.json."""
    if explicit:
        return dialect_named(explicit)
    template = None
    if isinstance(source, Mapping):
        config = source
    else:
        path = Path(source)
        config = _config_of(path)
        template = read_template(path)
    name = (_from_template(template) if template else None) or _from_config(config)
    if name is None:
        raise ValueError(f"cannot tell the tool dialect of {source!r}; pass it explicitly")
    return DIALECTS[name]


def _config_of(path: Path) -> Mapping[str, Any]:
    """config.json, or for a GGUF file the model type its metadata names."""
    if is_gguf(path):
        return {"model_type": open_gguf(path).architecture}
    config_file = path / "config.json"
    return json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}


def _from_template(template: str) -> str | None:
    if DSML in template:
        return "dsml"
    if "<arg_key>" in template:
        return "glm45" if "</arg_key>\n<arg_value>" in template else "glm47"
    if "<tool_call>" in template:
        return "hermes"
    if "<|im_start|>" in template:
        return "hermes"  # ChatML without tool support (SmolLM2): Hermes is ChatML's tool convention
    return None


def _from_config(config: Mapping[str, Any]) -> str | None:
    kind = str(config.get("model_type", "")).lower()
    archs = " ".join(config.get("architectures") or []).lower()
    if kind == "deepseek_v32" or "deepseekv32" in archs:
        return "dsml"
    if kind.startswith("glm4"):
        return "glm45"
    if kind.startswith("qwen") or "qwen" in archs:
        return "hermes"
    return None
