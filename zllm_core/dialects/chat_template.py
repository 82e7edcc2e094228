"""Hugging Face Jinja chat templates, rendered the way `transformers` renders them.

Templates are untrusted model-repository code, so they run in Jinja's immutable sandbox with
exactly the helpers HF provides (trim_blocks/lstrip_blocks, its `tojson`, `raise_exception`,
`strftime_now`, a namespace that refuses dunder names, `{% generation %}` blocks). One deliberate
difference: tool-call arguments print back the exact JSON text they were parsed from (HF would
re-serialize them), so a model's own tool call re-enters the next prompt byte for byte.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .conversation import FunctionTool, Message
from .dialect import ToolDialect
from .json_args import hf_tojson
from .selection import dialect_for
from .template_files import read_special_tokens, read_template

PACKAGED = Path(__file__).resolve().parent / "templates"  # official templates shipped as package data


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; render its body."""
    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


class _Namespace(jinja2.utils.Namespace):
    def __init__(*args: Any, **kwargs: Any):  # noqa: N805 - Jinja's signature trick for `self=`
        self, attrs = args[0], dict(*args[1:], **kwargs)
        for name in attrs:
            _check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)


def _check_name(name: Any) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(f"templates may not set underscore attributes ({name!r})")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols, _GenerationBlock])
    env.filters["tojson"] = hf_tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                       namespace=_Namespace, dict=dict)
    return env


_ENV = _environment()


# String methods whose result depends on where a literal occurs in the string they are called on.
_STRING_TESTS = frozenset({"startswith", "endswith", "split", "rsplit", "partition", "rpartition",
                           "find", "rfind", "index", "rindex", "count", "replace", "removeprefix",
                           "removesuffix"})


def content_literals(source: str) -> tuple[str, ...]:
    """The strings a template tests values against (`'</think>' in content`,
    `content.startswith('<tool_response>')`): what, besides roles and fields, it can branch on."""
    found = set()
    for node in _ENV.parse(source).find_all((jinja2.nodes.Compare, jinja2.nodes.Call)):
        if isinstance(node, jinja2.nodes.Compare):
            if any(op.op in ("in", "notin") for op in node.ops):
                found.update(e.value for e in (node.expr, *(op.expr for op in node.ops))
                             if isinstance(e, jinja2.nodes.Const) and isinstance(e.value, str))
        elif isinstance(node.node, jinja2.nodes.Getattr) and node.node.attr in _STRING_TESTS:
            found.update(a.value for a in node.args
                         if isinstance(a, jinja2.nodes.Const) and isinstance(a.value, str) and a.value)
    return tuple(sorted(found))


class ChatTemplate:
    def __init__(self, source: str, dialect: ToolDialect, special_tokens: Mapping[str, str] | None = None,
                 name: str | None = None):
        self.source = source
        self.dialect = dialect
        self.name = name or f"template-{hashlib.sha256(source.encode()).hexdigest()[:12]}"
        self.literals = content_literals(source)
        self._template = _ENV.from_string(source)
        self._special_tokens = dict(special_tokens or {})
        # Templates that predate the developer role skip it silently; for them it is a system turn.
        self._developer_role = "developer" in source
        # Templates that never read `tools` (SmolLM2's) get them from the dialect as plain turns.
        self._renders_tools = "tools" in source

    @classmethod
    def from_model_dir(cls, path: str | Path, dialect: ToolDialect | None = None,
                       name: str | None = None) -> "ChatTemplate":
        """`chat_template.jinja`, else `chat_template` in tokenizer_config.json (text, or a list of
        named templates: `name`, else "default"); its dialect, unless given, as `dialect_for` tells it."""
        path = Path(path)
        source = read_template(path, name)
        if source is None:
            raise FileNotFoundError(f"no chat template in {path}")
        names = read_special_tokens(path)
        return cls(source, dialect or dialect_for(path), names, name=f"{path.name} ({path})")

    def render(self, messages: Sequence[Message], tools: Sequence[FunctionTool] | None = (),
               add_generation_prompt: bool = True, **template_kwargs: Any) -> str:
        context = {**self._special_tokens, **template_kwargs}
        if not self._developer_role:
            messages = [replace(m, role="system") if m.role == "developer" else m for m in messages]
        if not self._renders_tools:
            messages, tools = self.dialect.inline_tools(messages, tools or ()), ()
        return self._template.render(
            messages=[self.dialect.template_message(m) for m in messages],
            tools=[t.openai_dict() for t in tools or ()] or None,
            add_generation_prompt=add_generation_prompt,
            **context,
        )
