"""A resent conversation is validated and converted once: each call costs its new items.

Agents resend their whole history on every call. A protocol's list of conversation items
(Chat and Anthropic `messages`, Responses `input`) is validated through `MessageMemo.validator`:
the leading items that are the same JSON documents as a recent request's (types, float bits
and key order: `_native.json_common_prefix`, strict where Python's == is not) take that
request's validated models, and only the rest is validated, with errors naming the absolute
index. `MessageMemo.convert` then reuses the canonical messages of those shared items, so
the same `Message` objects reach the renderer, which compares them by identity first.
`MessageMemo.held` names what a request left here for the conversation clock
(conversation_clock.py), which releases it with the rest of its conversation's state.

Conversion restarts only at a cut: an item boundary that no later item can merge across
(Responses joins an assistant turn's consecutive items into one message). Entries are kept
per scope (the tenant, `scope`): a memo hit is faster, and a tenant must not be able to time
another's conversations.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import orjson
from pydantic import ValidationError, ValidatorFunctionWrapHandler, WrapValidator

from zllm_core import _native
from zllm_core.conversation_clock import Held, json_bytes
from zllm_core.dialects.conversation import Message

scope: ContextVar[str] = ContextVar("zllm_message_memo_scope", default="")

# (items, start) -> (messages, cuts): the canonical messages of `items`, whose first one is
# item `start` of the request (for error paths), and per position 0..len(items) the number of
# messages produced before it if conversion may restart there, else -1.
ConvertFrom = Callable[[Sequence[Any], int], "tuple[list[Message], list[int]]"]

# A hard safety cap, least recently used first item dropped past it: entries are kept while
# the request is converted, before its conversation is known, and the conversation clock
# bounds them only once the prompt is built; this bounds what requests that failed before
# that (a template refusing the conversation) leave behind.
SAFETY_BYTES = 1 << 30
PER_HEAD = 4  # conversations kept under one first item (a shared opening message)


@dataclass(frozen=True)
class _Entry:
    raw: list[Any]  # the parsed JSON items as the client sent them
    items: list[Any]  # their validated models
    messages: tuple[Message, ...]
    cuts: tuple[int, ...]  # len(items) + 1 entries, as ConvertFrom gives them
    context: object  # what else the conversion read (convert's `context`)
    ends: tuple[int, ...]  # bytes held for items[:i], for i in 0..len(items)

    @property
    def nbytes(self) -> int:
        return self.ends[-1]

    def restart(self, shared: int) -> tuple[int, int]:
        """The last cut at or before item `shared`: (items, messages) that can be reused."""
        for i in range(shared, -1, -1):
            if self.cuts[i] >= 0:
                return i, self.cuts[i]
        return 0, 0


class ResentList(list):
    """Validated items that remember the JSON they came from and the entry they continue."""

    raw: list[Any]
    key: Hashable
    base: _Entry | None
    shared: int  # leading items that are base's


class MessageMemo:
    def __init__(self, max_bytes: int = SAFETY_BYTES):
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._heads: OrderedDict[Hashable, list[_Entry]] = OrderedDict()
        self._lock = threading.Lock()  # the clock releases entries from other threads
        self.hits = self.items_reused = 0

    def validator(self) -> WrapValidator:
        """The field validator (`Annotated[list[Item], memo.validator()]`)."""
        return WrapValidator(self._validate)

    def _validate(self, raw: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(raw, list) or not raw or not isinstance(raw[0], dict):
            return handler(raw)
        head = _head_key(raw[0])
        if head is None:
            return handler(raw)
        key = (scope.get(), head)
        base, shared = self._best(key, raw)
        out = ResentList(base.items[:shared] if base is not None else ())
        out.extend(_suffix(handler, raw, shared))
        out.raw, out.key, out.base, out.shared = raw, key, base, shared
        return out

    def _best(self, key: Hashable, raw: list[Any]) -> tuple[_Entry | None, int]:
        best, shared = None, 0
        for entry in self._heads.get(key, ()):
            n = _native.json_common_prefix(raw, entry.raw)
            if n > shared:
                best, shared = entry, n
        return best, shared

    def convert(self, items: Sequence[Any], convert_from: ConvertFrom, context: object = None) -> list[Message]:
        """The canonical messages of validated `items`; those `validator` found resent are reused
        when the conversion that made them read the same `context` (an object compared by
        identity: server state a conversion consults, such as remembered tool-call text)."""
        if not isinstance(items, ResentList):
            return convert_from(items, 0)[0]
        base = items.base if items.base is not None and items.base.context is context else None
        start, reused = base.restart(items.shared) if base is not None else (0, 0)
        messages, cuts = convert_from(items[start:], start)
        ends = _ends(items.raw, start, base.ends[:start + 1] if base is not None else (0,))
        if base is not None:
            self.hits += 1
            self.items_reused += start
            messages = [*base.messages[:reused], *messages]
            cuts = [*base.cuts[:start], *(c + reused if c >= 0 else c for c in cuts)]
        self._remember(items, _Entry(items.raw, list(items), tuple(messages), tuple(cuts), context, ends))
        return messages

    def held(self, items: Sequence[Any]) -> tuple[Held, ...]:
        """What `convert` kept for `items` (their first item's entries), for the conversation
        clock; () when nothing was kept."""
        key = getattr(items, "key", None)
        with self._lock:
            entries = self._heads.get(key) if key is not None else None
            if not entries:
                return ()
            return (Held("memo", (id(self), key), sum(e.nbytes for e in entries), lambda: self.forget(key)),)

    def forget(self, key: Hashable) -> None:
        """Drops the entries kept under `key` (a `held` key), if still kept."""
        with self._lock:
            self.nbytes -= sum(e.nbytes for e in self._heads.pop(key, ()))

    def _remember(self, items: ResentList, entry: _Entry) -> None:
        # The entry this one continues whole is replaced by it; branches of one opening stay.
        continued = items.base if items.base is not None and items.shared == len(items.base.raw) else None
        with self._lock:
            old = self._heads.pop(items.key, [])
            kept = [entry, *(e for e in old if e is not continued)][:PER_HEAD]
            self._heads[items.key] = kept
            self.nbytes += sum(e.nbytes for e in kept) - sum(e.nbytes for e in old)
            while self.nbytes > self.max_bytes and len(self._heads) > 1:
                self.nbytes -= sum(e.nbytes for e in self._heads.popitem(last=False)[1])


def _ends(raw: list[Any], start: int, ends: tuple[int, ...]) -> tuple[int, ...]:
    """`ends` (bytes held for raw[:start]) extended over the rest. An item holds its parsed JSON
    and half as much again: measured, its validated model and canonical message share the
    JSON's strings and add their own objects (about 1.5x the JSON for a chat history)."""
    out, total = list(ends), ends[-1]
    for item in raw[start:]:
        total += json_bytes(item) * 3 // 2
        out.append(total)
    return tuple(out)


def _head_key(item: dict[str, Any]) -> Hashable | None:
    try:
        return hash(orjson.dumps(item))
    except orjson.JSONEncodeError:  # what only the standard parser reads (a 100-digit integer)
        return None


def _suffix(handler: ValidatorFunctionWrapHandler, raw: list[Any], start: int) -> list[Any]:
    """raw[start:] validated; on an error the whole list is, so errors name absolute indices."""
    if start == len(raw):
        return []
    if not start:
        return handler(raw)
    try:
        return handler(raw[start:])
    except ValidationError:
        return handler(raw)  # raises the same errors, located in the whole list


def every_item(convert_one: Callable[[Any, int], list[Message]]) -> ConvertFrom:
    """A ConvertFrom for protocols whose items convert one by one: every boundary is a cut."""
    def convert_from(items: Sequence[Any], start: int) -> tuple[list[Message], list[int]]:
        messages, cuts = [], [0]
        for i, item in enumerate(items):
            messages += convert_one(item, start + i)
            cuts.append(len(messages))
        return messages, cuts
    return convert_from
