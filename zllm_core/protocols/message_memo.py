"""A resent conversation is validated and converted once: each call costs its new items.

Agents resend their whole history on every call. A protocol's list of conversation items
(Chat and Anthropic `messages`, Responses `input`) is validated through `MessageMemo.validator`:
the leading items that are the same JSON documents as a recent request's (types, float bits
and key order: `_native.json_common_prefix`, strict where Python's == is not) take that
request's validated models, and only the rest is validated, with errors naming the absolute
index. `MessageMemo.convert` then reuses the canonical messages of those shared items, so
the same `Message` objects reach the renderer, which compares them by identity first.

Conversion restarts only at a cut: an item boundary that no later item can merge across
(Responses joins an assistant turn's consecutive items into one message). Entries are kept
per scope (the tenant, `scope`): a memo hit is faster, and a tenant must not be able to time
another's conversations.
"""
from __future__ import annotations

from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import orjson
from pydantic import ValidationError, ValidatorFunctionWrapHandler, WrapValidator

from zllm_core import _native
from zllm_core.dialects.conversation import Message

scope: ContextVar[str] = ContextVar("zllm_message_memo_scope", default="")

# (items, start) -> (messages, cuts): the canonical messages of `items`, whose first one is
# item `start` of the request (for error paths), and per position 0..len(items) the number of
# messages produced before it if conversion may restart there, else -1.
ConvertFrom = Callable[[Sequence[Any], int], "tuple[list[Message], list[int]]"]

MAX_CONVERSATIONS = 256  # distinct first items kept, least recently used dropped
PER_HEAD = 4  # conversations kept under one first item (a shared opening message)


@dataclass(frozen=True)
class _Entry:
    raw: list[Any]  # the parsed JSON items as the client sent them
    items: list[Any]  # their validated models
    messages: tuple[Message, ...]
    cuts: tuple[int, ...]  # len(items) + 1 entries, as ConvertFrom gives them
    context: object  # what else the conversion read (convert's `context`)

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
    def __init__(self, max_conversations: int = MAX_CONVERSATIONS):
        self.max_conversations = max_conversations
        self._heads: OrderedDict[Hashable, list[_Entry]] = OrderedDict()
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
        if base is not None:
            self.hits += 1
            self.items_reused += start
            messages = [*base.messages[:reused], *messages]
            cuts = [*base.cuts[:start], *(c + reused if c >= 0 else c for c in cuts)]
        self._remember(items, _Entry(items.raw, list(items), tuple(messages), tuple(cuts), context))
        return messages

    def _remember(self, items: ResentList, entry: _Entry) -> None:
        # The entry this one continues whole is replaced by it; branches of one opening stay.
        continued = items.base if items.base is not None and items.shared == len(items.base.raw) else None
        kept = [e for e in self._heads.pop(items.key, ()) if e is not continued]
        self._heads[items.key] = [entry, *kept][:PER_HEAD]
        while len(self._heads) > self.max_conversations:
            self._heads.popitem(last=False)


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
