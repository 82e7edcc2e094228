"""Tokenizer: exact byte-level BPE with tiktoken's special-token semantics, native hot path."""
from __future__ import annotations

import json
import os
import threading
import unicodedata
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, AbstractSet, Literal

import numpy as np

from zllm_core import _native
from zllm_core.model.gguf_file import is_gguf
from zllm_core.tokenizer.gguf_vocab import load_gguf_vocabulary
from zllm_core.tokenizer.hf_json import load_tokenizer_json
from zllm_core.tokenizer.rules import Rules, UnsupportedTokenizer
from zllm_core.tokenizer.unspellable import unspellable_pattern
from zllm_core.tokenizer.vocabulary import Vocabulary, load_family

if TYPE_CHECKING:
    from zllm_core.tokenizer.device_route import DeviceRoute

SpecialSet = AbstractSet[str] | Literal["all"]
DEVICE_FLOOR_CHARS = 4096  # shorter texts never ask for the GPU path (device_route.py)


class Tokenizer:
    """encode/decode like tiktoken's Encoding, for tiktoken families and tokenizer.json files."""

    def __init__(self, vocab: Vocabulary):
        self.name = vocab.name
        self.rules: tuple[Rules, ...] = vocab.rules
        self.special_tokens: dict[str, int] = dict(vocab.special_tokens)
        self.vocab_size: int = max(len(vocab.tokens), max(self.special_tokens.values(), default=-1) + 1)
        self._normalizer = vocab.normalizer
        self.merges = vocab.merges  # what the GPU tokenizer builds its merge table from (empty: tiktoken ranks)
        self._unspellable = unspellable_pattern(vocab.tokens)
        self._core = _native.TokenizerCore(
            tokens=vocab.tokens,
            merges=vocab.merges,
            whole_piece_first=vocab.whole_piece_first,
            grammars=[r.to_native() for r in vocab.rules],
            specials=[(s.encode(), i) for s, i in self.special_tokens.items()],
        )
        id_to_special = {i: s for s, i in self.special_tokens.items()}
        self._special_order = [id_to_special[i] for i in self._core.special_order()]
        self._policies: dict[tuple[frozenset, frozenset], _native.SpecialPolicy] = {}
        # The GPU full path (device_route.py): looked for on the first text of DEVICE_FLOOR_CHARS
        # or more, and found only where a CUDA device is present.
        self._device: DeviceRoute | None = None
        self._device_probed = False
        self._device_lock = threading.Lock()

    # ---- constructors
    @classmethod
    def from_family(cls, name: str, vocab_dir: str | os.PathLike | None = None) -> "Tokenizer":
        return cls(load_family(name, vocab_dir))

    @classmethod
    def from_tokenizer_json(cls, path: str | os.PathLike) -> "Tokenizer":
        return cls(load_tokenizer_json(path))

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "Tokenizer":
        return cls(load_gguf_vocabulary(path))

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, vocab_dir: str | os.PathLike | None = None) -> "Tokenizer":
        """A GGUF file's own metadata; in a directory tokenizer.json if present, else
        tokenizer_config.json's "zllm_tokenizer_family"."""
        model_dir = Path(model_dir)
        if is_gguf(model_dir):
            return cls.from_gguf(model_dir)
        if (model_dir / "tokenizer.json").is_file():
            return cls.from_tokenizer_json(model_dir / "tokenizer.json")
        config = model_dir / "tokenizer_config.json"
        family = json.loads(config.read_text()).get("zllm_tokenizer_family") if config.is_file() else None
        if not family:
            raise UnsupportedTokenizer(f"{model_dir}: no tokenizer.json and no tokenizer_config.json "
                                       '"zllm_tokenizer_family"')
        return cls.from_family(family, vocab_dir)

    # ---- encoding
    def encode(self, text: str, *, allowed_special: SpecialSet = frozenset(),
               disallowed_special: SpecialSet = "all") -> list[int]:
        policy = self.special_policy(allowed_special, disallowed_special)
        route = self.device_route(len(text))
        ids = route.encode(text, policy) if route is not None else None
        return ids.tolist() if ids is not None else self._native_call(self._core.encode, text, policy)

    def encode_to_numpy(self, text: str, *, allowed_special: SpecialSet = frozenset(),
                        disallowed_special: SpecialSet = "all") -> np.ndarray:
        """`encode`'s ids as a uint32 array, without a Python int per token (as tiktoken's)."""
        policy = self.special_policy(allowed_special, disallowed_special)
        route = self.device_route(len(text))
        ids = route.encode(text, policy) if route is not None else None
        return ids if ids is not None else self._native_call(self._core.encode_array, text, policy)

    def count(self, text: str, *, allowed_special: SpecialSet = frozenset(),
              disallowed_special: SpecialSet = "all") -> int:
        policy = self.special_policy(allowed_special, disallowed_special)
        route = self.device_route(len(text))
        ids = route.encode(text, policy) if route is not None else None
        return len(ids) if ids is not None else self._native_call(self._core.count, text, policy)

    def encode_batch(self, texts: Sequence[str], *, allowed_special: SpecialSet = frozenset(),
                     disallowed_special: SpecialSet = "all", num_threads: int | None = None) -> list[list[int]]:
        policy = self.special_policy(allowed_special, disallowed_special)
        route = self.device_route(sum(len(t) for t in texts))
        batch = route.encode_batch(list(texts), policy) if route is not None else None
        if batch is not None:
            return [ids.tolist() for ids in batch]
        texts = [self.normalize(t) for t in texts]
        threads = num_threads or os.cpu_count() or 1
        try:
            return self._core.encode_batch(texts, policy, threads)
        except UnicodeEncodeError:
            return self._core.encode_batch([repair_surrogates(t) for t in texts], policy, threads)

    def cpu_encode(self, text: str, policy: _native.SpecialPolicy, as_array: bool = False) -> list[int] | np.ndarray:
        """`encode` (or, as_array, `encode_to_numpy`) on the CPU path whatever the size: the
        reference the GPU path is checked by."""
        return self._native_call(self._core.encode_array if as_array else self._core.encode, text, policy)

    def device_route(self, chars: int) -> DeviceRoute | None:
        """The GPU full path if it takes a text of `chars` characters (see device_route.py)."""
        if chars < DEVICE_FLOOR_CHARS:
            return None
        if not self._device_probed:
            with self._device_lock:
                if not self._device_probed:
                    from zllm_core.tokenizer.device_route import attach  # it imports this module
                    self._device = attach(self)
                    self._device_probed = True
        route = self._device
        return route if route is not None and route.wants(chars) else None

    def attach_device(self, route: DeviceRoute | None) -> None:
        """Uses `route` for the GPU full path (None: the CPU path only), instead of looking."""
        self._device, self._device_probed = route, True

    @property
    def device(self) -> DeviceRoute | None:
        """The GPU full path attached so far (None: not looked for yet, or none)."""
        return self._device

    def pieces(self, text: str) -> list[str]:
        """The pre-tokenizer's pieces of ordinary text (special strings are not split out)."""
        return self._native_call(self._core.split, text)

    # ---- decoding
    def decode_bytes(self, ids: Collection[int]) -> bytes:
        return self._core.decode_bytes(list(ids))

    def decode(self, ids: Collection[int], errors: str = "replace") -> str:
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def token_bytes(self, token_id: int) -> bytes:
        return self._core.decode_bytes([token_id])

    @property
    def native(self) -> _native.TokenizerCore:
        """The native tokenizer handle the incremental path's native functions take."""
        return self._core

    def normalize(self, text: str, normal_prefix: int = 0) -> str:
        """The text as this tokenizer sees it (NFC when the tokenizer.json asks for it, without
        the characters the vocabulary cannot spell, see unspellable.py).
        `normal_prefix`: text[:normal_prefix] is known to be in normal form (it is a prefix of a
        normalized text, as a session's is), so only what follows the last ASCII character
        before it is normalized: O(len(text) - normal_prefix) for a continuing conversation."""
        composed = self._compose(text, normal_prefix)
        if self._unspellable is None:
            return composed
        # Composition neither makes nor removes an unspellable character (controls, planes 4-16).
        first = self._unspellable.search(composed, normal_prefix if composed is text else 0)
        if first is None:
            return composed
        return composed[:first.start()] + self._unspellable.sub("", composed[first.start():])

    def _compose(self, text: str, normal_prefix: int) -> str:
        if self._normalizer != "NFC" or text.isascii():
            return text
        start = _nfc_safe_start(text, normal_prefix)
        tail = text[start:]
        if unicodedata.is_normalized("NFC", tail):
            return text
        return text[:start] + unicodedata.normalize("NFC", tail)

    def special_policy(self, allowed: SpecialSet, disallowed: SpecialSet = "all") -> _native.SpecialPolicy:
        """The native form of tiktoken's allowed/disallowed special sets (cached)."""
        allowed_set = frozenset(self.special_tokens) if allowed == "all" else frozenset(allowed)
        disallowed_set = (frozenset(self.special_tokens) - allowed_set if disallowed == "all"
                          else frozenset(disallowed))
        key = (allowed_set, disallowed_set)
        policy = self._policies.get(key)
        if policy is None:
            if len(self._policies) > 64:
                self._policies.clear()
            policy = _native.SpecialPolicy([s in allowed_set for s in self._special_order],
                                           [s in disallowed_set for s in self._special_order])
            self._policies[key] = policy
        return policy

    # ---- internals
    def _native_call(self, fn, text: str, *args):
        text = self.normalize(text)
        try:
            return fn(text, *args)
        except UnicodeEncodeError:  # raised before any work when the text has lone surrogates
            return fn(repair_surrogates(text), *args)

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size}, rules={[r.name for r in self.rules]})"


def _nfc_safe_start(text: str, upto: int, reach: int = 256) -> int:
    """The last position p <= upto (looking back at most `reach`) of an ASCII character, else 0.
    NFC never composes or reorders across an ASCII character, so NFC(text) is NFC(text[:p]) +
    NFC(text[p:]); and a prefix of a normalized text is normalized, so NFC(text[:p]) is
    text[:p] when p <= upto."""
    for p in range(min(upto, len(text) - 1), max(0, upto - reach) - 1, -1):
        if text[p] < "\x80":
            return p
    return 0


def repair_surrogates(text: str) -> str:
    """tiktoken's repair: a surrogate pair becomes its character, a lone surrogate U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
