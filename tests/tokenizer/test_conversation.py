"""Token-exact history (issue 21): a conversation's recorded ids are reused for text resent
verbatim, and only then; the rest of a prompt is tokenized as usual."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from zllm_core.rope import Rope, flat
from zllm_core.tokenizer.conversation import ConversationTokenizer
from zllm_core.tokenizer.incremental import IncrementalTokenizer

PROMPT = "<|im_start|>system\n" + "Keep every file tidy. " * 300 + "<|im_end|>\n<|im_start|>assistant\n"
NEXT = "<|im_end|>\n<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
def qwen(family_tokenizers):
    return family_tokenizers["qwen2"]


@pytest.fixture
def conversations(qwen):
    return ConversationTokenizer(IncrementalTokenizer(qwen, allowed_special="all"))


def answer(tok) -> np.ndarray:
    """'hello' as 'hel' + 'lo': ids that re-tokenize to others."""
    ids = np.array(tok.encode("hel") + tok.encode("lo"), np.uint32)
    assert tok.encode("hello") != ids.tolist()
    return ids


def test_a_verbatim_resent_answer_keeps_the_generated_ids(conversations, qwen):
    first = conversations.encode(PROMPT)
    conversations.record(first, PROMPT, answer(qwen))
    later = conversations.encode(PROMPT + "hello" + NEXT)
    seen = np.concatenate((first.ids, answer(qwen)))
    assert np.array_equal(later.ids[:len(seen)], seen)
    assert later.ids[len(seen):].tolist() == qwen.encode(NEXT, allowed_special="all")
    assert later.conversation == first.conversation and later.exact_chars == len(PROMPT) + 5


def test_an_answer_resent_differently_falls_back_to_the_prompt_and_is_logged(conversations, qwen, caplog):
    first = conversations.encode(PROMPT)
    conversations.record(first, PROMPT, answer(qwen))
    with caplog.at_level(logging.WARNING, logger="zllm.tokenizer"):
        later = conversations.encode(PROMPT + "help" + NEXT)
    assert np.array_equal(later.ids[:len(first.ids)], first.ids)
    assert later.ids[len(first.ids):].tolist() == qwen.encode("help" + NEXT, allowed_special="all")
    assert conversations.stats.near_misses == 1 and "exact-history near-miss" in caplog.text


def test_without_a_recorded_span_the_ids_are_the_canonical_ones(conversations, qwen):
    text = PROMPT + "hello" + NEXT
    assert conversations.encode(text).ids.tolist() == qwen.encode(text, allowed_special="all")
    assert conversations.stats.hits == 0


def test_spans_are_evicted_with_their_session(qwen):
    tokens = IncrementalTokenizer(qwen, budget_bytes=1, allowed_special="all")  # one session at a time
    conversations = ConversationTokenizer(tokens)
    first = conversations.encode(PROMPT)
    conversations.record(first, PROMPT, answer(qwen))
    conversations.encode("an unrelated conversation " * 300)
    assert tokens.store.get(first.session) is None
    assert conversations.encode(PROMPT + "hello" + NEXT).exact_chars == 0


def test_a_prompt_sent_again_is_no_near_miss(conversations, qwen):
    first = conversations.encode(PROMPT)
    conversations.record(first, PROMPT, answer(qwen))
    again = conversations.encode(PROMPT)  # a retry, or count_tokens before the real call
    assert np.array_equal(again.ids, first.ids) and conversations.stats.near_misses == 0


def test_a_conversation_forked_from_a_longer_one_keeps_finding_its_own_spans(conversations, qwen):
    system = "<|im_start|>system\n" + "Keep every file tidy. " * 600 + "<|im_end|>\n"  # 3 blocks
    conversations.encode(system + "<|im_start|>user\n" + "Read the file. " * 2000)  # many indexed blocks
    compacted = system + "<|im_start|>user\nSummary so far.<|im_end|>\n<|im_start|>assistant\n"
    fork = conversations.encode(compacted)  # the same instructions: a fork of that session
    conversations.record(fork, compacted, answer(qwen))
    later = conversations.encode(compacted + "hello" + NEXT)
    assert later.session == fork.session and later.exact_chars == len(compacted) + 5


def test_a_keyless_conversation_is_found_by_the_prompt_it_extends(qwen):
    """A rope over the previous prompt names its conversation without a key or a text lookup
    (the whole text is never made), and gives the ids the plain-string path gives."""
    ropes, strings = (ConversationTokenizer(IncrementalTokenizer(qwen, allowed_special="all")) for _ in range(2))
    text, prefix = PROMPT, None
    for turn in range(4):
        a, b = ropes.encode(text, prefix=prefix), strings.encode(flat(text))
        assert np.array_equal(a.ids, b.ids) and a.conversation == ropes.encode(flat(text)).conversation
        ropes.record(a, text, answer(qwen))
        strings.record(b, flat(text), answer(qwen))
        prefix, text = text, Rope(text, f"hello{NEXT}Step {turn}.")
    assert ropes.stats.identified == 2  # turns 2 and 3: turn 1 extends a plain string
