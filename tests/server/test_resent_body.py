"""A resent body parsed from where it stops resending means exactly what parsing it whole means."""
from __future__ import annotations

import json
import random

import orjson
import pytest

from zllm_core import _native
from zllm_core.server.body import loads
from zllm_core.server.resent_body import ResentBodies

ROUTE = ("tenant", "/v1/chat/completions")


def chat(messages: list, **dump) -> bytes:
    return json.dumps({"model": "m", "messages": messages, "max_tokens": 8, "tools": [{"x": 1}]},
                      **dump).encode()


def turns(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f'turn {i} "q" \\ ] }} é'}
            for i in range(n)]


def same_as_whole(bodies: ResentBodies, body: bytes, route=ROUTE):
    """Parses through `bodies` and checks it against the whole-body parse (or its error)."""
    try:
        whole = loads(body)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError) as ours:
            bodies.loads(body, route, loads)
        assert str(ours.value) == str(exc)
        return None
    doc = bodies.loads(body, route, loads)
    assert _native.json_equal(doc, whole), (body, doc, whole)
    return doc


def test_a_continued_conversation_reuses_the_parsed_items_of_the_last_body():
    bodies = ResentBodies(min_bytes=0)
    first = same_as_whole(bodies, chat(turns(6)))
    second = same_as_whole(bodies, chat(turns(8)))
    assert bodies.hits == 1
    assert all(a is b for a, b in zip(first["messages"], second["messages"][:6]))
    assert second["tools"] == [{"x": 1}]


@pytest.mark.parametrize("edit", [
    lambda b: b.replace(b'"max_tokens": 8', b'"max_tokens": 8, "messages": []'),  # a later key wins
    lambda b: b.replace(b"}], \"max_tokens\"", b"},], \"max_tokens\""),  # a trailing comma
    lambda b: b.replace(b"turn 1 ", b"turn one "),  # an early item edited
    lambda b: b[:-1],  # cut short
    lambda b: b.replace(b"}, {\"role\": \"user\", \"content\": \"turn 6", b"} {\"role\": \"user\", \"content\": \"turn 6"),
    lambda b: b.replace(b'"max_tokens"', b'"max_tok\\u0065ns"'),
    lambda b: b.replace(b'"messages": [', b'"messages":\n [ '),
])
def test_edits_after_a_resent_prefix_mean_what_the_whole_body_means(edit):
    bodies = ResentBodies(min_bytes=0)
    same_as_whole(bodies, chat(turns(6)))
    same_as_whole(bodies, edit(chat(turns(8))))


def test_fewer_items_and_other_tenants_are_parsed_right():
    bodies = ResentBodies(min_bytes=0)
    same_as_whole(bodies, chat(turns(8)))
    same_as_whole(bodies, chat(turns(3)))
    assert bodies.hits == 1  # three items reused, then the rest of the body parsed
    other = same_as_whole(bodies, chat(turns(9)), route=("other", ROUTE[1]))
    assert bodies.hits == 1 and other is not None


def test_randomly_mutated_resent_bodies_parse_as_whole_bodies():
    rng = random.Random(7)
    bodies = ResentBodies(min_bytes=0, per_route=4)
    alphabet = ['"', "\\", "[", "]", "{", "}", ",", ":", " ", "a", "é", "\\u00e9", "\n", "0", "-"]
    history: list = []
    for _ in range(400):
        history.append({"role": "user", "content": "".join(rng.choice(alphabet[4:]) for _ in range(rng.randint(0, 12))),
                        "n": [rng.random(), rng.randint(-5, 5), None, True]})
        if rng.random() < 0.1:
            history = history[:rng.randint(0, len(history))]
        body = chat(history, indent=rng.choice([None, 1]), separators=rng.choice([None, (",", ":")]))
        if rng.random() < 0.3:  # a byte-level edit, often making the body malformed
            at = rng.randrange(len(body))
            body = body[:at] + rng.choice(alphabet).encode() + body[at + rng.randint(0, 2):]
        same_as_whole(bodies, body)
    assert bodies.hits > 100


def test_kept_bodies_stay_within_their_budget():
    bodies = ResentBodies(budget_bytes=4000, min_bytes=0)
    for i in range(50):
        same_as_whole(bodies, chat(turns(10)), route=(str(i), ROUTE[1]))
    assert 0 < bodies._bytes <= 4000


def test_scanning_answers_only_what_byte_offsets_decide():
    body = b'{"a": [1, {"b": "]\\""}, "x"], "messages": [[1], 2]}'
    key, open_, ends = _native.json_conversation_items(body)
    assert (key, body[open_:ends[-1] + 1]) == ("a", b'[1, {"b": "]\\""}, "x"]')
    assert [orjson.loads(body[s:e]) for s, e in zip([open_ + 1, *[e + 2 for e in ends]], ends)] == [1, {"b": ']"'}, "x"]
    assert _native.json_conversation_items(b'{"a": [1], "a": [2]}') is None
    assert _native.json_conversation_items(b'{"\\u0061": [1]}') is None
    assert _native.json_conversation_items(b'[1, 2]') is None
