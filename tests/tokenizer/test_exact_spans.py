"""A span's text is its base then its tail (a prompt and the answer generated after it), never
joined: every comparison on it must equal the comparison on the joined text."""
import random

import numpy as np

from zllm_core.tokenizer.exact_spans import ExactSpans, Span

IDS = np.zeros(1, np.uint32)


def test_piecewise_comparisons_equal_those_of_the_joined_text():
    rng = random.Random(0)
    for _ in range(20000):
        t, u = ("".join(rng.choice("ab") for _ in range(rng.randint(0, 6))) for _ in range(2))
        i, j = rng.randint(0, len(t)), rng.randint(0, len(u))
        a, b = Span(IDS, t[:i], t[i:]), Span(IDS, u[:j], u[j:])
        assert len(a) == len(t)
        assert a.same(b) == (t == u)
        assert a.extends(u) == t.startswith(u)
        assert a.begins(u) == u.startswith(t)


def test_a_prompt_object_proves_its_spans_by_identity():
    """The renderer hands the previous prompt object: a span on it is checked on its tail only."""
    prompt = "p" * 1000
    answer = Span(IDS, prompt, "answer")
    text = prompt + "answer and more"
    assert answer.begins(text, prefix=prompt)
    assert not answer.begins(prompt + "answeR", prefix=prompt)
    spans = ExactSpans().with_span(Span(IDS, prompt)).with_span(answer)
    assert spans.longest_prefix_of(text, prompt) is answer
    assert spans.longest_prefix_of(prompt + "other", prompt).tail == ""


def test_a_resent_prompt_replaces_its_span():
    spans = ExactSpans().with_span(Span(IDS, "ab", "cd")).with_span(Span(IDS, "abc", "d"))
    assert len(spans.spans) == 1
