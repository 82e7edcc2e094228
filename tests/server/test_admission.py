"""Admission renders and tokenizes off the event loop, so a huge prompt stalls no other stream."""
import asyncio
import time

import pytest

from zllm_core.dialects import Message
from zllm_core.model.model_names import resolve_model
from zllm_core.protocols.canonical import CanonicalRequest, RequestError, SamplingParams
from zllm_core.server.generation import Generation, Limits
from zllm_core.server.metrics import ServerMetrics
from zllm_core.server.prompt import PromptBuilder
from zllm_core.tokenizer import Tokenizer

TICK = 0.001
# A million characters of distinct words (~40 ms to render and tokenize here).
HUGE = " ".join(f"v{i * 7919 % 1000003:x}q" for i in range(125_000))


@pytest.fixture(scope="module")
def generation():
    model_dir = resolve_model("zllm-demo")
    prompts = PromptBuilder.from_model_dir(model_dir, Tokenizer.from_pretrained(model_dir))
    return Generation(None, tuple, prompts, Limits(max_model_len=16384, max_output_tokens=64), ServerMetrics(dict, dict))


def test_a_million_character_prompt_leaves_the_event_loop_running(generation):
    huge = CanonicalRequest([Message(role="user", content=HUGE)], [], SamplingParams())

    async def admit_while_ticking():
        ticks, done = 0, False

        async def ticker():
            nonlocal ticks
            while not done:
                await asyncio.sleep(TICK)
                ticks += 1
        task = asyncio.create_task(ticker())
        start = time.perf_counter()
        with pytest.raises(RequestError) as info:  # far over the context: refused, as before
            await generation.admit(huge)
        elapsed = time.perf_counter() - start
        done = True
        await task
        return ticks, elapsed, info.value

    ticks, elapsed, err = asyncio.run(admit_while_ticking())
    assert err.code == "context_length_exceeded"
    # Blocked, the loop could not tick at all before admission ended; free, it ticks throughout.
    assert ticks >= 3, (ticks, elapsed)


def test_tenants_never_share_a_tokenizer_session(generation):
    talk = [Message(role="system", content="You are terse.\n" * 400), Message(role="user", content="hi")]
    more = talk + [Message(role="assistant", content="hello"), Message(role="user", content="again")]
    before = generation.prompts.metrics()
    for tenant, conversation in (("tenant-a", talk), ("tenant-b", talk), ("tenant-a", more)):
        asyncio.run(generation.admit(CanonicalRequest(conversation, [], SamplingParams()), tenant))
    after = generation.prompts.metrics()
    # b's identical conversation is not found in a's sessions; a's next turn continues a's own
    # (from its previous prompt's ids, which its text begins with: exact_spans.py)
    continued = sum(after[k] - before[k] for k in ("repairs", "exact_hits"))
    assert after["cold"] - before["cold"] == 2 and continued == 1
