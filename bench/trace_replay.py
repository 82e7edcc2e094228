"""Agent traces -> chat requests, shared by the benchmarks and the tests.

`agent_trace()` is the trace they replay by default: tools/make_agent_trace.py run on this
machine (it reads the standard library, package docs and gettext catalogues), kept under the
cache directory by the generator's hash, so a fresh clone needs nothing from outside it.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from zllm_core.dialects.chat_template import ChatTemplate
from zllm_core.dialects.conversation import FunctionTool, Message, ToolCall


GENERATOR = Path(__file__).resolve().parents[1] / "tools" / "make_agent_trace.py"


def agent_trace(sessions: int = 16, seed: int = 20261130) -> Path:
    """The path of a generated trace, made once (about 6 s for 16 sessions) and then reused."""
    version = hashlib.sha256(GENERATOR.read_bytes()).hexdigest()[:12]
    root = Path(os.environ.get("ZLLM_CACHE_DIR") or Path.home() / ".cache" / "zllm") / "traces"
    path = root / f"agent_sessions-{sessions}-{seed}-{version}.jsonl"
    if path.is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".trace.", dir=root)
    try:
        with os.fdopen(fd, "wb") as out:
            subprocess.run([sys.executable, str(GENERATOR), "--sessions", str(sessions),
                            "--seed", str(seed)], stdout=out, check=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)  # whole or absent: a killed run leaves only the temporary name
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def trace_requests(path: Path, sessions: int, max_calls: int):
    """(session index, system, tools, messages) for each call of the first ``sessions`` sessions."""
    with path.open() as f:
        for s, line in zip(range(sessions), f):
            session = json.loads(line)
            tools = [FunctionTool(t["function"]["name"], t["function"].get("description"),
                                  t["function"].get("parameters", {})) for t in session["tools"]]
            history: list[Message] = []
            events = session["events"]
            done = 0
            for call in session["calls"][:max_calls]:
                for event in events[done:call]:
                    history = apply_event(history, event)
                done = call
                yield s, session["system"], tools, list(history)


def apply_event(history: list[Message], event: dict) -> list[Message]:
    role = event["role"]
    if role == "compact":  # the client replaced everything so far with a summary
        return [Message("user", event["content"])]
    if role == "assistant":
        calls = tuple(ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                      for c in event.get("tool_calls") or ())
        return history + [Message("assistant", event.get("content") or "", event.get("reasoning_content"), calls)]
    if role == "tool":
        return history + [Message("tool", event["content"], tool_call_id=event["tool_call_id"])]
    return history + [Message(role, event["content"])]


def rendered_calls(path: Path, template: ChatTemplate, sessions: int, max_calls: int,
                   preamble: str = "") -> Iterator[tuple[int, str]]:
    """(session index, prompt text) per call, rendered with add_generation_prompt=True; a
    preamble becomes a first user message (a session that starts by reading a large input)."""
    first = [Message("user", preamble)] if preamble else []
    for s, system, tools, history in trace_requests(path, sessions, max_calls):
        yield s, template.render([Message("system", system), *first, *history], tools, add_generation_prompt=True)


def trace_text(path: Path, chars: int) -> str:
    """About `chars` characters of the trace's own message contents, in order."""
    parts, size = [], 0
    with path.open() as f:
        for line in f:
            for event in json.loads(line)["events"]:
                parts.append(event.get("content") or "")
                size += len(parts[-1])
                if size >= chars:
                    return "\n".join(parts)[:chars]
    return "\n".join(parts)
