"""FenceFactory: forced structure is compiled before the request runs (and refused when it
cannot be enforced); auto compiles in the background and never fails a request."""
import time

import pytest

from zllm_core.dialects.conversation import FunctionTool
from zllm_core.fence.factory import FenceFactory
from zllm_core.fence.json_schema import UnsupportedSchema
from zllm_core.protocols.canonical import ResponseFormat, ToolChoice

TOOL = FunctionTool("f", None, {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
ODD = FunctionTool("g", None, {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}})


@pytest.fixture
def factory(vocab):
    return FenceFactory("hermes", lambda tags: vocab)


def test_forced_fences_are_ready_at_once_and_shared(factory):
    a = factory.for_request([TOOL], ToolChoice("required"), None, False, 32)
    b = factory.for_request([TOOL], ToolChoice("required"), None, False, 64)
    assert a.grammar is b.grammar and (a.max_tokens, b.max_tokens) == (32, 64)
    assert factory.for_request([], ToolChoice("none"), ResponseFormat("json_object"), False, 8).grammar


def test_auto_runs_unfenced_until_its_grammar_compiled(factory):
    assert factory.for_request([TOOL], ToolChoice("auto"), None, False, 32) is None
    deadline = time.monotonic() + 30
    while (fence := factory.for_request([TOOL], ToolChoice("auto"), None, False, 32)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert fence.grammar is not None


def test_an_unenforceable_tool_set_fails_forced_requests_only(factory):
    with pytest.raises(UnsupportedSchema):
        factory.for_request([ODD], ToolChoice("required"), None, False, 32)
    assert factory.for_request([ODD], ToolChoice("auto"), None, False, 32) is None
    deadline = time.monotonic() + 30
    while factory._compiling:  # the background compile fails, and its failure is kept
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert list(factory._grammars.values()) == [None]
    assert factory.for_request([ODD], ToolChoice("auto"), None, False, 32) is None and not factory._compiling
