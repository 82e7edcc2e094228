"""A chat template that refuses a conversation (its raise_exception) is the client's 400."""
import asyncio

import pytest

from zllm_core.dialects import ChatTemplate, Message, dialect_named
from zllm_core.model.model_names import resolve_model
from zllm_core.protocols.canonical import CanonicalRequest, RequestError, SamplingParams
from zllm_core.server.generation import Generation, Limits
from zllm_core.server.metrics import ServerMetrics
from zllm_core.server.prompt import PromptBuilder
from zllm_core.tokenizer import Tokenizer

REFUSING = ("{% if messages[0].role != 'system' %}"
            "{{ raise_exception('Conversations must start with a system message.') }}"
            "{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}")


@pytest.fixture(scope="module")
def generation():
    tokenizer = Tokenizer.from_pretrained(resolve_model("zllm-demo"))
    prompts = PromptBuilder(ChatTemplate(REFUSING, dialect_named("hermes")), tokenizer)
    return Generation(None, tuple, prompts, Limits(max_model_len=1024, max_output_tokens=16), ServerMetrics(dict, dict))


def request(*messages: Message) -> CanonicalRequest:
    return CanonicalRequest(list(messages), [], SamplingParams())


def test_template_raise_exception_is_a_400_naming_messages(generation):
    with pytest.raises(RequestError) as info:
        asyncio.run(generation.admit(request(Message(role="user", content="hi"))))
    assert info.value.status == 400 and info.value.param == "messages"
    assert "must start with a system message" in info.value.message


def test_a_conversation_the_template_accepts_is_admitted(generation):
    admitted = asyncio.run(generation.admit(request(Message(role="system", content="be brief"),
                                                    Message(role="user", content="hi"))))
    assert admitted.prompt.text == "be briefhi"
