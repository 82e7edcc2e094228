"""Logprobs through the official SDK: Chat's `logprobs`/`top_logprobs` (streamed and not) and
Responses' `top_logprobs` with `include: ["message.output_text.logprobs"]`."""
import math

import openai
import pytest

from .conftest import MODEL

USER = [{"role": "user", "content": "Name a colour."}]


def check_entries(entries, top: int, greedy: bool) -> None:
    assert entries
    for e in entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == top
        assert bytes(e.bytes).decode("utf-8", errors="replace") == e.token
        alternatives = [t.logprob for t in e.top_logprobs]
        assert alternatives == sorted(alternatives, reverse=True)
        if greedy:  # the argmax is the most likely alternative, with the same logprob
            assert e.top_logprobs[0].token == e.token
            assert math.isclose(e.top_logprobs[0].logprob, e.logprob, abs_tol=1e-5)


def test_chat_logprobs_cover_every_generated_token(openai_client):
    r = openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=6,
                                              temperature=0, logprobs=True, top_logprobs=3)
    entries = r.choices[0].logprobs.content
    check_entries(entries, top=3, greedy=True)
    assert len(entries) == r.usage.completion_tokens
    assert "".join(e.token for e in entries).startswith(r.choices[0].message.content or "")


def test_chat_logprobs_stream_once_each_and_match_the_unstreamed(openai_client):
    args = dict(model=MODEL, messages=USER, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2)
    whole = openai_client.chat.completions.create(**args).choices[0].logprobs.content
    streamed = []
    for chunk in openai_client.chat.completions.create(**args, stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.content
    assert [e.token for e in streamed] == [e.token for e in whole]
    assert all(math.isclose(a.logprob, b.logprob, abs_tol=1e-5) for a, b in zip(streamed, whole))


def test_chat_without_logprobs_reports_none(openai_client):
    r = openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
    assert r.choices[0].logprobs is None


def test_sampled_tokens_report_their_own_logprob(openai_client):
    r = openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=6, temperature=1.0,
                                              seed=7, logprobs=True, top_logprobs=0)
    check_entries(r.choices[0].logprobs.content, top=0, greedy=False)


def test_top_logprobs_without_logprobs_is_a_400(openai_client):
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2, top_logprobs=2)
    assert e.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2, logprobs=True,
                                              top_logprobs=21)
    assert e.value.body["param"] == "top_logprobs"


def test_responses_logprobs_in_the_text_part_and_the_deltas(openai_client):
    args = dict(model=MODEL, input="Name a colour.", max_output_tokens=6, temperature=0,
                top_logprobs=2, include=["message.output_text.logprobs"])
    r = openai_client.responses.create(**args)
    part = r.output[0].content[0]
    check_entries(part.logprobs, top=2, greedy=True)
    assert len(part.logprobs) == r.usage.output_tokens
    deltas, done = [], None
    with openai_client.responses.stream(**args) as stream:
        for ev in stream:
            if ev.type == "response.output_text.delta":
                deltas += ev.logprobs
            elif ev.type == "response.output_text.done":
                done = ev.logprobs
    assert [e.token for e in deltas] == [e.token for e in done] == [e.token for e in part.logprobs]
