"""Each protocol's request becomes the same canonical conversation."""
import json

import pytest

from zllm_core.protocols import anthropic_messages as am
from zllm_core.protocols import openai_chat as oc
from zllm_core.protocols import openai_responses as orr
from zllm_core.protocols.canonical import RequestError

from .shapes import (
    ANTHROPIC_CONVERSATION, CHAT_CONVERSATION, RESPONSES_CONVERSATION, claude_code_request,
    codex_request,
)


def canonical(protocol, body):
    if protocol == "chat":
        return oc.to_canonical(oc.ChatRequest.model_validate(body))
    if protocol == "messages":
        return am.to_canonical(am.MessagesRequest.model_validate(body))
    return orr.to_canonical(orr.ResponsesRequest.model_validate(body), [])


def test_one_conversation_through_three_protocols_is_one_canonical_conversation():
    chat = canonical("chat", CHAT_CONVERSATION)
    messages = canonical("messages", ANTHROPIC_CONVERSATION)
    responses = canonical("responses", RESPONSES_CONVERSATION)
    assert chat.messages == messages.messages == responses.messages
    assert chat.tools == messages.tools == responses.tools
    assert [m.role for m in chat.messages] == ["system", "user", "assistant", "tool", "user"]


def test_claude_code_shape_drops_billing_header_and_keeps_mid_conversation_system():
    req = canonical("messages", claude_code_request("m"))
    assert req.messages[0].role == "system"
    assert "x-anthropic-billing-header" not in req.messages[0].content
    assert "You are Claude Code" in req.messages[0].content
    assert [m.role for m in req.messages].count("system") == 2
    assert len(req.tools) == 24 and req.thinking is True
    assert req.cache_key == "user_abc_account_def_session_123"


def test_codex_shape_expands_namespaces_and_skips_hosted_tools():
    req = canonical("responses", codex_request("m"))
    names = [t.name for t in req.tools]
    assert "shell" in names and "mcp_files__read_file" in names
    assert not any("web_search" in n for n in names)
    assert req.messages[0].role == "system" and req.messages[1].role == "system"  # developer
    assert req.cache_key == "codex-session-1"


@pytest.mark.parametrize("protocol,body,param", [
    ("chat", {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, "messages[0].content[0]"),
    ("messages", {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {}}]}]}, "messages[0].content[0]"),
    ("responses", {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:,"}]}]}, "input[0].content[0]"),
    ("chat", {"model": "m", "messages": [{"role": "tool", "content": "x"}]},
     "messages[0].tool_call_id"),
    ("chat", {"model": "m", "messages": [{"role": "user", "content": "x"}],
              "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ("messages", {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
                  "stop_sequences": [""]}, "stop_sequences"),
    ("chat", {"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": [""]}, "stop"),
])
def test_unsupported_content_is_rejected_naming_the_field(protocol, body, param):
    with pytest.raises(RequestError) as err:
        canonical(protocol, body)
    assert err.value.status == 400 and err.value.param == param


def test_anthropic_tool_result_blocks_become_tool_messages_before_the_text():
    body = {"model": "m", "max_tokens": 4, "messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
             "content": [{"type": "text", "text": "boom"}]},
            {"type": "text", "text": "and now?"}]}]}
    msgs = canonical("messages", body).messages
    assert [(m.role, m.content) for m in msgs] == [("assistant", ""), ("tool", "boom"), ("user", "and now?")]
    assert json.loads(msgs[0].tool_calls[0].arguments) == {"a": 1}


def test_responses_input_items_gather_one_assistant_turn():
    body = {"model": "m", "input": [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}", "namespace": "ns"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"}]}
    msgs = canonical("responses", body).messages
    assert [m.role for m in msgs] == ["user", "assistant", "tool"]
    turn = msgs[1]
    assert (turn.reasoning, turn.content) == ("hm", "ok")
    assert [c.name for c in turn.tool_calls] == ["f", "ns__g"]


def test_anthropic_tolerates_unknown_top_level_fields():
    body = {**ANTHROPIC_CONVERSATION, "context_management": {"edits": []},
            "output_config": {"effort": "high"}, "metadata": {"user_id": "u"}}
    assert canonical("messages", body).messages


def test_reasoning_sealed_for_stateless_clients_comes_back_as_the_same_text():
    from zllm_core.protocols.openai_responses import sealed_reasoning
    body = {"model": "m", "input": [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": [], "encrypted_content": sealed_reasoning("déjà vu")},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]}
    assert canonical("responses", body).messages[1].reasoning == "déjà vu"
