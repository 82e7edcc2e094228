"""Test and benchmark corpora: this machine's standard library and the agent trace as text.

CI checks a deterministic sample (a few MB); ZLLM_FULL_CORPUS=1 checks everything.
"""
from __future__ import annotations

import json
import os
import sysconfig
from pathlib import Path

FULL = os.environ.get("ZLLM_FULL_CORPUS") == "1"
SAMPLE_STDLIB_CHARS = 1_500_000
SAMPLE_TRACE_SESSIONS = 2


def stdlib_sources(full: bool = FULL, limit_chars: int | None = None) -> list[str]:
    """Python sources of the standard library in path order, up to about `limit_chars`; the
    sample takes every 40th file up to SAMPLE_STDLIB_CHARS."""
    paths = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
    limit = limit_chars if full else SAMPLE_STDLIB_CHARS
    texts, size = [], 0
    for path in paths[::1 if full else 40]:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
        size += len(texts[-1])
        if limit is not None and size > limit:
            break
    return texts


def render_session(session: dict) -> str:
    """A session as the text a model would see, roughly: system, tools, then every message."""
    parts = [session["system"], json.dumps(session["tools"], ensure_ascii=False)]
    for event in session["events"]:
        parts.append(event.get("role", ""))
        for key in ("reasoning_content", "content"):
            if event.get(key):
                parts.append(event[key])
        for call in event.get("tool_calls") or []:
            parts.append(json.dumps(call, ensure_ascii=False))
    return "\n\n".join(parts)


def trace_texts(trace: Path, full: bool = FULL) -> list[str]:
    texts = []
    with open(trace, encoding="utf-8") as f:
        for k, line in enumerate(f):
            if not full and k >= SAMPLE_TRACE_SESSIONS:
                break
            texts.append(render_session(json.loads(line)))
    return texts


def gettext_prose(limit_chars: int) -> str:
    """Translated messages from this machine's gettext catalogues: prose in many scripts."""
    import gettext
    import glob

    parts, size = [], 0
    for path in sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo"))[::7]:
        try:
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog
        except Exception:
            continue
        for value in catalog.values():
            if isinstance(value, str) and len(value) > 3:
                parts.append(value)
                size += len(value) + 1
        if size >= limit_chars:
            break
    return "\n".join(parts)[:limit_chars]
