"""Fence fixtures: the Qwen2 vocabulary (151,669 tokens) and a sampler that draws from the
fence's allowed set the way random logits would."""
from __future__ import annotations

import numpy as np
import pytest

from zllm_core.fence.grammar import FenceVocab
from zllm_core.fence.token_fence import TokenFence
from zllm_core.fence.tool_grammar import tags_for
from zllm_core.tokenizer import Tokenizer

END_IDS = (151645, 151643)  # <|im_end|>, <|endoftext|>


@pytest.fixture(scope="session")
def qwen() -> Tokenizer:
    return Tokenizer.from_family("qwen2")


@pytest.fixture(scope="session")
def vocab_for(qwen):
    """The Qwen2 vocabulary's FenceVocab for a dialect's tags, built once per dialect."""
    built: dict[str, FenceVocab] = {}

    def build(dialect: str) -> FenceVocab:
        if dialect not in built:
            built[dialect] = FenceVocab.build([qwen.token_bytes(i) for i in range(qwen.vocab_size)],
                                              qwen.special_tokens, END_IDS, tags_for(dialect))
        return built[dialect]
    return build


@pytest.fixture(scope="session")
def vocab(vocab_for) -> FenceVocab:
    return vocab_for("hermes")


class RandomLogits:
    """Sampling with i.i.d. random logits picks uniformly among the allowed tokens (Gumbel-max
    over i.i.d. scores), so that is what this draws; ids are cached per shared mask row."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self._ids: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def generate(self, fence: TokenFence) -> tuple[list[int], bool]:
        """(tokens before the end token, whether an end token came within the budget)."""
        out: list[int] = []
        while len(out) < fence.max_tokens:
            row = fence.bitmask()
            cached = self._ids.get(id(row))
            if cached is None or cached[0] is not row:
                cached = (row, np.flatnonzero(fence.allowed()))
                self._ids[id(row)] = cached
            ids = cached[1]
            assert len(ids), f"the fence allows nothing after {out}"
            token = int(ids[self.rng.integers(len(ids))])
            if token in END_IDS:
                return out, True
            fence.advance(token)
            assert not fence.violated
            out.append(token)
        return out, False
