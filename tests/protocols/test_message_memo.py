"""The message memo: a resent history is validated and converted once, and a request that differs
anywhere (a type, a float's sign, a key's place) is converted as if nothing were remembered."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from zllm_core.protocols import anthropic_messages as am
from zllm_core.protocols import message_memo
from zllm_core.protocols import openai_chat as oc
from zllm_core.protocols import openai_responses as orr


def chat(messages: list[dict]) -> oc.CanonicalRequest:
    # orjson and the server hand the validator fresh objects every request: so do the tests
    body = json.loads(json.dumps({"model": "m", "messages": messages}))
    return oc.to_canonical(oc.ChatRequest.model_validate(body))


def history(turns: int) -> list[dict]:
    out = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        out += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    return out


def test_a_resent_history_reuses_its_messages():
    first = chat(history(3) + [{"role": "user", "content": "more?"}])
    hits = oc.MESSAGES.hits
    second = chat(history(3) + [{"role": "user", "content": "more?"}, {"role": "assistant", "content": "no"},
                                {"role": "user", "content": "why"}])
    assert oc.MESSAGES.hits == hits + 1
    assert all(a is b for a, b in zip(first.messages, second.messages))  # the same objects
    assert [m.content for m in second.messages[-3:]] == ["more?", "no", "why"]


def test_what_json_tells_apart_is_never_reused():
    """1, 1.0 and true, or keys in another order, print different arguments: a resent tool call
    whose input differs only so is converted again."""
    def request(value):
        return {"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": value}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}

    seen = []
    for value in ({"n": 1}, {"n": 1.0}, {"n": True}, {"n": -0.0}, {"n": 0.0},
                  {"a": 1, "b": 2}, {"b": 2, "a": 1}):
        body = json.loads(json.dumps(request(value)))
        canonical = am.to_canonical(am.MessagesRequest.model_validate(body))
        seen.append(canonical.messages[1].tool_calls[0].arguments)
    assert seen == ['{"n": 1}', '{"n": 1.0}', '{"n": true}', '{"n": -0.0}', '{"n": 0.0}',
                    '{"a": 1, "b": 2}', '{"b": 2, "a": 1}']


def test_errors_in_new_messages_name_their_place_in_the_whole_list():
    chat(history(4))
    with pytest.raises(ValidationError) as err:
        oc.ChatRequest.model_validate({"model": "m", "messages": history(4) + [{"role": "robot", "content": "x"}]})
    assert err.value.errors()[0]["loc"][:2] == ("messages", 9)
    with pytest.raises(ValidationError):
        oc.ChatRequest.model_validate({"model": "m", "messages": []})  # min_length still holds


def test_tenants_do_not_share_remembered_histories():
    chat(history(2) + [{"role": "user", "content": "tenant a"}])
    hits = oc.MESSAGES.hits
    token = message_memo.scope.set("tenant-b")
    try:
        chat(history(2) + [{"role": "user", "content": "tenant a"}])
    finally:
        message_memo.scope.reset(token)
    assert oc.MESSAGES.hits == hits


def responses(items: list[dict]) -> list:
    body = json.loads(json.dumps({"model": "m", "input": items}))
    return orr.input_messages(orr.ResponsesRequest.model_validate(body))


def test_responses_continue_an_assistant_turn_left_open():
    """Items after a resent function_call join its assistant turn: the conversion restarts
    before the open turn, never inside it."""
    call_a = {"type": "function_call", "call_id": "a", "name": "ls", "arguments": "{}"}
    call_b = {"type": "function_call", "call_id": "b", "name": "cat", "arguments": "{}"}
    user = {"type": "message", "role": "user", "content": "list and read"}
    first = responses([user, call_a])
    assert len(first) == 2 and len(first[1].tool_calls) == 1
    second = responses([user, call_a, call_b, {"type": "function_call_output", "call_id": "a", "output": "x"},
                        {"type": "function_call_output", "call_id": "b", "output": "y"}])
    assert second[0] is first[0]
    assert [c.id for c in second[1].tool_calls] == ["a", "b"]
    assert [m.role for m in second] == ["user", "assistant", "tool", "tool"]
