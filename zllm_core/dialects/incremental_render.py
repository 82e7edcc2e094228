"""Rendering a resent conversation costs its new messages, not its history.

A chat template is a loop over the whole conversation; rendering 1M characters of agent
history takes tens of milliseconds of Jinja on every call, for text that has not changed. So
a conversation keeps its rendered text without the generation prompt, and a window: the
first message, the last occurrence of every kind of message before its tail, and the tail
itself. A continuation renders the window with the new messages appended; when the window's
old text is a prefix of that render (the template did not re-render the old part, as Qwen3
does to reasoning once a new question arrives), the new part extends the stored text (a
rope: zllm_core/rope.py, so a resent megabyte is neither copied nor compared).

The window stands in for the history, so it must render the new messages as the whole
conversation would. That is checked once per template and shape, the template analogue of
the tokenizer's stable boundary: the first time a shape (the kinds of the window's messages,
old and new, and the template options) is seen, the conversation is rendered in full as well
and the two must agree, or the shape renders in full from then on. A kind is what a template
can branch on: role, which fields are present and non-empty, and for every string the
template tests content against (`'</think>' in content`, `startswith('<tool_response>')`,
read from its source), whether the content contains, starts or ends with it. A template
that fails `MAX_FAILED_SHAPES` shapes renders in full, named in a log line; so does one whose
sampled shadow render (`shadow_every`) ever disagrees.

What is kept for a conversation is named by `Rendered.state`; `held` and `forget` let the
conversation clock (conversation_clock.py) account and release it with the rest of its
conversation's state.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Hashable, Protocol, Sequence

from zllm_core.conversation_clock import Held
from zllm_core.rope import Rope, Text, flat
from zllm_core.rope import nbytes as text_nbytes

from .conversation import FunctionTool, Message

log = logging.getLogger("zllm.render")

TAIL = 2  # a window's last messages, kept whatever their kind (templates look at neighbours)
WINDOW_SLACK = 12  # messages a window grows by before it is compressed again (one render then)
MAX_FAILED_SHAPES = 8
# A hard safety cap, least recently used dropped past it: a conversation's render is kept
# before its id is known (the tokenizer finds it), so the conversation clock bounds it only
# once the prompt is built; this bounds what requests that failed before that leave behind
# (and a renderer used without a clock).
SAFETY_BYTES = 1 << 30


class Template(Protocol):
    literals: tuple[str, ...]  # strings the template tests message content against
    name: str

    def render(self, messages: Sequence[Message], tools: Sequence[FunctionTool] | None = (),
               add_generation_prompt: bool = True, **kwargs: Any) -> str: ...


@dataclass(frozen=True)
class Rendered:
    text: Text  # the prompt, exactly as the template renders it
    prefix: Text | None  # the text object `text` was built by extending (the conversation's
    # previous prompt), or None: lets the tokenizer prove shared text by identity
    state: Hashable | None = None  # the key its conversation's render is kept under (`held`)


@dataclass(frozen=True, eq=False)
class _Rendered:
    """A rendered conversation, as its next call continues it."""

    scope: str
    messages: list[Message]  # never mutated
    tools: list[FunctionTool]
    options: tuple[tuple[str, Any], ...]
    prompt: Text  # as returned: the conversation and then `suffix`, the generation prompt
    suffix: str
    window: tuple[int, ...]  # indices of the messages that stand in for the history
    kinds: tuple[Hashable, ...]  # their kinds
    window_text: str  # the window rendered without the generation prompt

    @property
    def nbytes(self) -> int:
        """Its two texts, and a pointer a message (the messages are the memo's)."""
        return (text_nbytes((self.prompt, self.window_text))
                + 8 * (len(self.messages) + 2 * len(self.window)) + 256)


@dataclass
class RenderStats:
    full: int = 0  # conversations rendered whole
    incremental: int = 0  # continuations rendered from their window
    forks: int = 0  # continuations whose old part rendered differently (rendered whole)
    shapes_checked: int = 0
    shapes_failed: int = 0
    shadow_checks: int = 0
    shadow_failures: int = 0


@dataclass
class IncrementalRenderer:
    template: Template
    budget_bytes: int = SAFETY_BYTES
    shadow_every: int = 256  # every Nth incremental render is also rendered whole, off the request path
    stats: RenderStats = field(default_factory=RenderStats)

    def __post_init__(self) -> None:
        self.incremental = True
        self._lock = threading.Lock()
        self._recent: OrderedDict[Hashable, list[_Rendered]] = OrderedDict()
        self._bytes = 0
        self._shapes: dict[Hashable, bool] = {}  # checked shapes: whether the window renders true
        self._prompts: dict[Hashable, str] = {}  # generation prompt by (options, tools?, last kind)
        self._shadow = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zllm-render-shadow")

    def render(self, messages: Sequence[Message], tools: Sequence[FunctionTool] = (), scope: str = "",
               **options: Any) -> Rendered:
        """`template.render(messages, tools, add_generation_prompt=True, **options)`, exactly."""
        messages, tools, opts = list(messages), list(tools), tuple(sorted(options.items()))
        base = self._continued(scope, messages, tools, opts) if self.incremental else None
        out = self._extend(base, messages) if base is not None else None
        if out is None:
            out = self._whole(scope, messages, tools, opts)
        rendered, state = out
        if state is not None and len(state.messages) >= 2:
            rendered = replace(rendered, state=self._keep(state))
        return rendered

    def held(self, key: Hashable) -> Held | None:
        """The conversations kept under `key` (a `Rendered.state`), for the conversation clock."""
        with self._lock:
            kept = self._recent.get(key)
            if not kept:
                return None
            return Held("render", key, sum(s.nbytes for s in kept), lambda: self.forget(key))

    def forget(self, key: Hashable) -> None:
        """Drops the conversations kept under `key`, if still kept."""
        with self._lock:
            self._bytes -= sum(s.nbytes for s in self._recent.pop(key, ()))

    # ---- the two paths
    def _whole(self, scope: str, messages: list[Message], tools: list[FunctionTool],
               opts: tuple[tuple[str, Any], ...]) -> tuple[Rendered, _Rendered | None]:
        self.stats.full += 1
        prompt = self._render(messages, tools, opts, True)
        window, kinds = _compressed(tuple(range(len(messages))), tuple(self.kind(m) for m in messages))
        suffix = self._prompt_suffix(messages, tools, opts, kinds[-1] if kinds else None, prompt)
        if suffix is None or not prompt.endswith(suffix):
            return Rendered(prompt, None), None  # nothing a continuation could build on
        window_text = self._render([messages[i] for i in window], tools, opts, False)
        return Rendered(prompt, None), _Rendered(scope, messages, tools, opts, prompt, suffix, window, kinds,
                                                 window_text)

    def _extend(self, base: _Rendered, messages: list[Message]) -> tuple[Rendered, _Rendered] | None:
        """The continuation of `base` by messages[len(base.messages):], from its window."""
        new = range(len(base.messages), len(messages))
        window = base.window + tuple(new)
        kinds = base.kinds + tuple(self.kind(messages[i]) for i in new)
        # Whether the window hides history is part of the shape: a check that saw the whole
        # conversation in its window proves nothing about standing in for one.
        shape = (base.options, bool(base.tools), len(base.window) < len(base.messages),
                 *(_coarse(k) for k in kinds[len(base.window) - 1:]))
        if self._shapes.get(shape) is False:
            return None
        window_text = self._render([messages[i] for i in window], base.tools, base.options, False)
        if not window_text.startswith(base.window_text):
            self.stats.forks += 1
            return None
        added = window_text[len(base.window_text):]  # what the new messages add to the text
        suffix = self._prompts.get((base.options, bool(base.tools), kinds[-1]))
        if shape not in self._shapes or suffix is None:
            suffix = self._check_shape(shape, base, messages, added, window, kinds, window_text)
            if suffix is None:
                return None
        self.stats.incremental += 1
        if added.startswith(base.suffix):  # most templates open an assistant turn as their prompt does
            prompt, prefix = Rope(base.prompt, added[len(base.suffix):] + suffix), base.prompt
        else:
            prompt, prefix = "".join((flat(base.prompt)[:len(base.prompt) - len(base.suffix)], added, suffix)), None
        self._maybe_shadow(prompt, messages, base)
        compressed, kept = window, kinds
        if len(window) > len(base.window) and len(window) > WINDOW_SLACK:
            compressed, kept = _compressed(window, kinds)
        if compressed != window:
            window_text = self._render([messages[i] for i in compressed], base.tools, base.options, False)
        return Rendered(prompt, prefix), _Rendered(base.scope, messages, base.tools, base.options, prompt, suffix,
                                                   compressed, kept, window_text)

    # ---- checks
    def _check_shape(self, shape: Hashable, base: _Rendered, messages: list[Message], added: str,
                     window: tuple[int, ...], window_kinds: tuple[Hashable, ...], window_text: str) -> str | None:
        """Renders the conversation whole to see whether its window tells the truth for this shape."""
        self.stats.shapes_checked += 1
        whole = self._render(messages, base.tools, base.options, False)
        prompt = self._render(messages, base.tools, base.options, True)
        window_prompt = self._render([messages[i] for i in window], base.tools, base.options, True)
        suffix = prompt[len(whole):]
        kept = len(base.prompt) - len(base.suffix)
        ok = (len(whole) == kept + len(added) and whole.startswith(flat(base.prompt)[:kept]) and whole.endswith(added)
              and prompt.startswith(whole) and window_prompt.startswith(window_text)
              and window_prompt[len(window_text):] == suffix)
        self._shapes[shape] = ok
        if ok:
            self._prompts[(base.options, bool(base.tools), window_kinds[-1])] = suffix
            return suffix
        self.stats.shapes_failed += 1
        if self.stats.shapes_failed >= MAX_FAILED_SHAPES:
            self._give_up(f"its window disagreed with the whole conversation in {MAX_FAILED_SHAPES} shapes")
        return None

    def _prompt_suffix(self, messages: list[Message], tools: list[FunctionTool],
                       opts: tuple[tuple[str, Any], ...], last: Hashable, prompt: str) -> str | None:
        """What add_generation_prompt appends after a conversation ending in a message of kind
        `last`: measured once by rendering without it (None: it is not a pure suffix)."""
        key = (opts, bool(tools), last)
        if key not in self._prompts and messages:
            whole = self._render(messages, tools, opts, False)
            if not prompt.startswith(whole):
                return None
            self._prompts[key] = prompt[len(whole):]
        return self._prompts.get(key)

    def _maybe_shadow(self, prompt: Text, messages: list[Message], base: _Rendered) -> None:
        if not self.shadow_every or (self.stats.incremental % self.shadow_every):
            return
        self._shadow.submit(self._shadow_check, prompt, messages, base.tools, base.options)

    def _shadow_check(self, prompt: Text, messages: list[Message], tools: list[FunctionTool],
                      opts: tuple[tuple[str, Any], ...]) -> None:
        self.stats.shadow_checks += 1
        if self._render(messages, tools, opts, True) != flat(prompt):
            self.stats.shadow_failures += 1
            self._give_up("a sampled whole render disagreed with its incremental render")

    def flush(self) -> None:
        """Waits for the shadow renders already sampled (one worker: they run in order)."""
        self._shadow.submit(lambda: None).result()

    def _give_up(self, why: str) -> None:
        if self.incremental:
            self.incremental = False
            log.warning("chat template %s renders every conversation whole from now on: %s",
                        self.template.name, why)

    # ---- helpers
    def kind(self, m: Message) -> Hashable:
        """What a template can branch on in one message, its content read through its literals."""
        content = m.content
        tests = tuple((s in content, content.startswith(s), content.endswith(s))
                      for s in self.template.literals)
        return (m.role, bool(content), bool(content.strip()), m.reasoning is None, bool(m.reasoning),
                len(m.tool_calls), m.tool_call_id is None, m.name is None, tests)

    def _render(self, messages: list[Message], tools: list[FunctionTool], opts: tuple[tuple[str, Any], ...],
                generation_prompt: bool) -> str:
        return self.template.render(messages, tools, add_generation_prompt=generation_prompt, **dict(opts))

    def _continued(self, scope: str, messages: list[Message], tools: list[FunctionTool],
                   opts: tuple[tuple[str, Any], ...]) -> _Rendered | None:
        """The longest kept conversation that `messages` continue (same scope, tools, options)."""
        if len(messages) < 2:
            return None
        with self._lock:
            candidates = list(self._recent.get(_head(scope, messages), ()))
        best = None
        for c in candidates:
            k = len(c.messages)
            if (k <= len(messages) and (best is None or k > len(best.messages)) and c.options == opts
                    and messages[:k] == c.messages and c.tools == tools):
                best = c
        return best

    def _keep(self, state: _Rendered) -> Hashable:
        """Keeps `state`, replacing the kept conversations it continues (same head, its prefix);
        returns the key it is kept under."""
        key = _head(state.scope, state.messages)
        with self._lock:
            kept = []
            for old in self._recent.pop(key, ()):
                k = len(old.messages)
                if k <= len(state.messages) and state.messages[:k] == old.messages:
                    self._bytes -= old.nbytes
                else:
                    kept.append(old)
            self._recent[key] = [state, *kept]
            self._bytes += state.nbytes
            while self._bytes > self.budget_bytes and len(self._recent) > 1:
                _, dropped = self._recent.popitem(last=False)
                self._bytes -= sum(s.nbytes for s in dropped)
        return key


def _head(scope: str, messages: list[Message]) -> Hashable:
    """Conversations are found by their first two messages (a shared system prompt is not enough)."""
    a, b = messages[0], messages[1]
    return scope, a.role, a.content, b.role, b.content


def _coarse(kind: Hashable) -> Hashable:
    """What of a kind names a shape: role, reasoning, calls and the content tests, not which
    fields are empty or how many calls (the window's render shows those as they are)."""
    role, _, _, _, reasoning, calls, _, _, tests = kind  # type: ignore[misc]
    return role, reasoning, bool(calls), tests


def _compressed(window: tuple[int, ...], kinds: tuple[Hashable, ...]) -> tuple[tuple[int, ...], tuple[Hashable, ...]]:
    """The first message, the last occurrence of each kind before the tail, and the tail."""
    if len(window) <= TAIL + 1:
        return window, kinds
    middle = range(1, len(window) - TAIL)
    last = {kinds[j]: j for j in middle}
    keep = [0, *sorted(last.values()), *range(len(window) - TAIL, len(window))]
    return tuple(window[j] for j in keep), tuple(kinds[j] for j in keep)
