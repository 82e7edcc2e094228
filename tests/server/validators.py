"""Event-order validators: each checks one protocol's stream against the rules its clients rely on.

They take the stream as plain JSON dicts (as sent on the wire) and raise AssertionError naming
the first event that breaks a rule.
"""
from __future__ import annotations

from typing import Any

DELTA_FOR_BLOCK = {"text": {"text_delta"}, "thinking": {"thinking_delta", "signature_delta"},
                   "tool_use": {"input_json_delta"}}


def validate_chat_stream(chunks: list[dict[str, Any]], include_usage: bool = False) -> None:
    assert chunks, "empty stream"
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1, f"chunk ids differ: {ids}"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    body = chunks[:-1] if include_usage else chunks
    if include_usage:
        last = chunks[-1]
        assert last["choices"] == [], "usage chunk must have empty choices"
        assert "cached_tokens" in last["usage"]["prompt_tokens_details"]
        assert all(c.get("usage") is None for c in body), "usage before the final chunk"
    assert body[0]["choices"][0]["delta"].get("role") == "assistant", "first delta lacks role"
    finishes = [i for i, c in enumerate(body) if c["choices"][0]["finish_reason"] is not None]
    assert finishes == [len(body) - 1], f"finish_reason must be on the last choice chunk: {finishes}"
    seen: set[int] = set()
    for n, c in enumerate(body):
        for call in c["choices"][0]["delta"].get("tool_calls") or []:
            index = call["index"]
            if index not in seen:
                assert index == len(seen), f"chunk {n}: tool call index {index} out of order"
                assert call.get("id") and call["function"].get("name"), \
                    f"chunk {n}: first chunk of call {index} lacks id or name"
                seen.add(index)
            else:
                assert not call.get("id") and not call["function"].get("name"), \
                    f"chunk {n}: id/name repeated for call {index}"


def validate_responses_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Returns the final response object after checking it against the streamed items."""
    assert [e["sequence_number"] for e in events] == list(range(len(events))), \
        "sequence_number must count up from 0"
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds[:2]
    assert kinds[-1] in ("response.completed", "response.incomplete", "response.failed"), kinds[-1]
    items: list[dict[str, Any]] = []
    open_item: dict[str, Any] | None = None
    parts_open = False
    for n, e in enumerate(events[2:-1], start=2):
        kind = e["type"]
        if kind == "response.output_item.added":
            assert open_item is None, f"event {n}: item added while another is open"
            assert e["output_index"] == len(items), f"event {n}: output_index skips"
            open_item = e["item"]
            items.append(open_item)
            continue
        assert open_item is not None, f"event {n}: {kind} outside an item"
        assert e.get("item_id", open_item["id"]) == open_item["id"], f"event {n}: wrong item_id"
        assert e["output_index"] == len(items) - 1, f"event {n}: wrong output_index"
        if kind == "response.content_part.added":
            assert not parts_open and e["content_index"] == 0
            parts_open = True
        elif kind.endswith(".delta"):
            if open_item["type"] == "function_call":
                assert kind == "response.function_call_arguments.delta", f"event {n}: {kind}"
            else:
                assert parts_open, f"event {n}: delta before content_part.added"
        elif kind == "response.content_part.done":
            assert parts_open, f"event {n}: part closed twice"
            parts_open = False
        elif kind == "response.output_item.done":
            assert not parts_open, f"event {n}: item done with a part open"
            assert e["item"]["id"] == open_item["id"]
            items[-1] = e["item"]
            open_item = None
    assert open_item is None, "stream ended with an open item"
    final = events[-1]["response"]
    assert [i["id"] for i in final["output"]] == [i["id"] for i in items], \
        "final output ids differ from the streamed item ids"
    assert final["output"] == items, "final output differs from the items streamed"
    return final


def validate_anthropic_stream(events: list[dict[str, Any]]) -> None:
    kinds = [e["type"] for e in events if e["type"] != "ping"]
    assert kinds[0] == "message_start", kinds[:1]
    assert kinds[-2:] == ["message_delta", "message_stop"], kinds[-2:]
    assert kinds.count("message_delta") == 1 and kinds.count("message_stop") == 1
    next_index, open_block = 0, None
    for n, e in enumerate(events):
        kind = e["type"]
        if kind == "content_block_start":
            assert open_block is None, f"event {n}: block opened inside block"
            assert e["index"] == next_index, f"event {n}: block index {e['index']} out of order"
            open_block = e["content_block"]["type"]
        elif kind == "content_block_delta":
            assert open_block is not None and e["index"] == next_index, f"event {n}: stray delta"
            assert e["delta"]["type"] in DELTA_FOR_BLOCK[open_block], \
                f"event {n}: {e['delta']['type']} inside a {open_block} block"
        elif kind == "content_block_stop":
            assert open_block is not None and e["index"] == next_index, f"event {n}: stray stop"
            open_block, next_index = None, next_index + 1
        elif kind == "message_delta":
            assert open_block is None, f"event {n}: message_delta with a block open"
            assert e["delta"]["stop_reason"], "message_delta lacks stop_reason"
            assert {"input_tokens", "output_tokens", "cache_read_input_tokens"} <= set(e["usage"])
