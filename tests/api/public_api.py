"""The public API as text: one line per public name (`public_names`) and per public member of
each class (defined in zllm_core, inherited ones included), with its signature.

    python -m tests.api.public_api > tests/api/public_api.txt   # after a deliberate change
"""
from __future__ import annotations

import inspect
import re
from typing import Any

import zllm_core


def _signature(obj: Any) -> str:
    if isinstance(getattr(obj, "model_fields", None), dict):  # a request body: its fields, not pydantic's repr
        return "(" + ", ".join(obj.model_fields) + ")"
    try:
        return re.sub(r" at 0x[0-9a-f]+", "", str(inspect.signature(obj)))  # a default's address varies
    except (TypeError, ValueError):  # a builtin without a signature
        return "(...)"


def _members(cls: type) -> list[str]:
    own = {}
    for base in reversed(cls.__mro__):
        if base.__module__.startswith("zllm_core"):
            own.update({k: v for k, v in vars(base).items() if not k.startswith("_")})
    lines = []
    for name, value in sorted(own.items()):
        if isinstance(value, (staticmethod, classmethod)):
            lines.append(f"  {name}{_signature(getattr(cls, name))}")
        elif isinstance(value, property):
            lines.append(f"  {name} (property)")
        elif inspect.isfunction(value):
            lines.append(f"  {name}{_signature(value)}")
    return lines


def public_names() -> dict[str, Any]:
    """`zllm_core.__all__`, and the adapter kept in its module (transformers is optional)."""
    from zllm_core.adapters.transformers import FenceLogitsProcessor
    names = {name: getattr(zllm_core, name) for name in zllm_core.__all__}
    return {**names, "adapters.transformers.FenceLogitsProcessor": FenceLogitsProcessor}


def render() -> list[str]:
    lines = []
    for name, obj in sorted(public_names().items()):
        if inspect.isclass(obj):
            lines.append(f"class {name}{_signature(obj)}")
            lines += _members(obj)
        else:
            lines.append(f"def {name}{_signature(obj)}")
    return lines


if __name__ == "__main__":
    print("\n".join(render()))
