"""GenerationGuard: a generation pushed into a loop by a scripted logits hook has the loop
broken (the continuing token excluded) and, when loops keep coming back, its turn ended."""
import numpy as np

from zllm_core.fence.guard import GenerationGuard, GuardConfig
from zllm_core.fence.token_fence import TokenFence

VOCAB, END = 1000, (7,)


def test_a_repeated_ngram_is_noticed_and_its_successor_banned():
    guard = GenerationGuard(GuardConfig(max_cycle=4, min_repeats=3, min_span=9, max_breaks=5))
    for t in [5, 6, 7] * 3:
        guard.observe(t)
    assert guard.banned == 5 and guard.breaks == 1  # 5 would start the cycle again
    guard.observe(9)
    assert guard.banned is None


def test_the_fence_row_excludes_the_banned_token_and_then_ends_the_turn():
    fence = TokenFence(None, 100, GenerationGuard(GuardConfig(max_breaks=1)), vocab_size=VOCAB, end_ids=END)
    assert fence.bitmask() is None  # nothing to do: the row costs nothing
    for t in [3] * 12:
        fence.advance(t)
    allowed = fence.allowed()
    assert not allowed[3] and allowed.sum() == VOCAB - 1
    for t in [4, 8, 8] + [8] * 12:  # a second loop: more than max_breaks loops
        fence.advance(t)
    assert np.flatnonzero(fence.allowed()).tolist() == list(END)
