"""The shadow verifier catches a session whose stored tokens disagree with its text."""
from __future__ import annotations

import logging

import numpy as np

from zllm_core import _native
from zllm_core.tokenizer.incremental import IncrementalTokenizer

LINES = "def f(x):\n    return x + 1\n\nclass A:\n  pass\n" * 200


def corrupt(inc: IncrementalTokenizer, key: str, at: int) -> int:
    """Gives the session the tokens of its text with the character at `at` changed, so that
    text and tokens disagree; returns the first token that differs."""
    session = inc.store.find("s", "", key)
    text = str(session.text)
    bad = text[:at] + ("#" if text[at] != "#" else "$") + text[at + 1:]
    good_ids, session.tokens = session.tokens.ids, _native.encode_tail(inc._core, inc._policy, bad)
    return int(np.flatnonzero(good_ids[:session.tokens.size] != session.tokens.ids[:len(good_ids)])[0])


def test_corrupted_session_is_detected_dropped_and_the_next_call_is_exact(family_tokenizers, caplog):
    tok = family_tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, shadow_rate=1.0)
    inc.encode(LINES, "s", key="k")
    bad_token = corrupt(inc, "k", 30)  # far left of any repair window
    with caplog.at_level(logging.ERROR, logger="zllm_core.tokenizer.shadow"):
        inc.encode(LINES + "turn 2\n", "s", key="k")  # spliced onto the corrupted prefix
        inc.shadow.drain()
    assert inc.shadow.stats.mismatches == 1 and inc.metrics()["shadow_mismatches"] == 1
    assert inc.store.find("s", "", "k") is None
    assert f"at token {bad_token} " in caplog.text
    text = LINES + "turn 2\nturn 3\n"
    assert inc.encode(text, "s", key="k").tolist() == tok.encode(text, allowed_special="all")
    inc.shadow.drain()
    assert inc.shadow.stats.mismatches == 1 and inc.stats.cold == 2


def test_agreement_check_rejects_tokens_that_disagree_next_to_the_splice(family_tokenizers):
    tok = family_tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    inc.encode(LINES, "s", key="k")
    corrupt(inc, "k", len(LINES) - 60)  # inside the window the repair re-reads
    text = LINES + "turn 2\n"
    assert inc.encode(text, "s", key="k").tolist() == tok.encode(text, allowed_special="all")
    assert inc.stats.disagreements == 1


def test_unsampled_calls_are_not_checked(family_tokenizers):
    inc = IncrementalTokenizer(family_tokenizers["qwen2"], shadow_rate=0.0)
    inc.encode(LINES, "s", key="k")
    inc.shadow.drain()
    assert inc.shadow.stats.checked == 0
