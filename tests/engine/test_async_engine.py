"""The asyncio front: streamed events, concurrent requests, cancellation that frees blocks."""
import asyncio
import contextlib
import random
from collections import Counter

import pytest

from zllm_core.engine.async_engine import AsyncEngine, EngineError
from zllm_core.engine.sampling_params import SamplingParams


@pytest.fixture
def async_engine(make_engine):
    engine = AsyncEngine(make_engine(enable_prefix_cache=False))
    yield engine
    engine.shutdown()


async def collect(engine, prompt, params):
    return [ev async for ev in engine.generate(prompt, params)]


def test_concurrent_streams_each_get_their_tokens_and_a_final_event(async_engine):
    params = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)

    async def main():
        return await asyncio.gather(*(collect(async_engine, list(range(1000 + i, 1020 + i)), params)
                                      for i in range(4)))

    for events in asyncio.run(main()):
        assert [len(e.token_ids) for e in events] == [1] * 5
        assert events[-1].finish_reason == "length" and events[-1].completion_tokens == 5
        assert all(e.finish_reason is None for e in events[:-1])
        assert events[0].prompt_tokens == 20


def test_a_consumer_that_goes_away_aborts_its_request_and_frees_its_blocks(async_engine):
    params = SamplingParams(max_tokens=10_000, temperature=0.0, ignore_eos=True)

    async def main():
        stream = async_engine.generate(list(range(1000, 1040)), params)
        async for _ in stream:
            break
        await stream.aclose()
        for _ in range(200):
            if async_engine.engine.kv.pool.is_empty() and not async_engine.engine.has_unfinished():
                return True
            await asyncio.sleep(0.01)
        return False

    assert asyncio.run(main())


def test_a_refused_prompt_raises_in_the_stream(async_engine):
    async def main():
        await collect(async_engine, [], SamplingParams(max_tokens=2))

    with pytest.raises(EngineError, match="at least one token"):
        asyncio.run(main())


def test_a_failing_hook_fails_its_request_and_the_others_finish(async_engine):
    def broken(tokens, row):
        raise RuntimeError("fence state lost")

    ok = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    bad = SamplingParams(max_tokens=3, temperature=0.0, logits_hook=broken)

    async def main():
        return await asyncio.gather(collect(async_engine, list(range(1000, 1010)), ok),
                                    collect(async_engine, list(range(2000, 2010)), bad),
                                    return_exceptions=True)

    good, failed = asyncio.run(main())
    assert good[-1].finish_reason == "length"
    assert isinstance(failed, EngineError) and not failed.refused and "fence state lost" in str(failed)
    assert async_engine.engine.kv.pool.is_empty()


def test_an_explicit_abort_ends_the_stream_with_abort(async_engine):
    params = SamplingParams(max_tokens=10_000, temperature=0.0, ignore_eos=True)

    async def main():
        events = []
        async for ev in async_engine.generate(list(range(1000, 1010)), params, request_id="stop-me"):
            events.append(ev)
            if len(events) == 2:
                async_engine.abort("stop-me")
        return events

    events = asyncio.run(main())
    assert events[-1].finish_reason == "abort"


def test_a_thousand_random_streams_with_disconnects_aborts_stop_strings_and_preemptions_leave_the_pool_empty(demo_model):
    """Up to 32 streams at once over a 6-block pool (preemption is forced), each one of: read
    to the end, disconnect after a few events, aborted from outside, or ended by a stop
    string the output processor finds (the engine is then told to finish it)."""
    from zllm_core.cache.scope import Scope
    from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
    from zllm_core.model.model_names import resolve_model
    from zllm_core.tokenizer import Tokenizer

    block_bytes = 16 * 2 * 2 * 64 * 4 * demo_model.config.num_layers
    engine = AsyncEngine(LLMEngine(demo_model, Tokenizer.from_pretrained(resolve_model("zllm-demo")),
                                   EngineConfig(kv_cache_bytes=6 * block_bytes, max_num_seqs=16,
                                                max_num_batched_tokens=192), Scope("async-soak")))
    rng = random.Random(3)
    ends = Counter()

    async def one(i: int) -> None:
        prompt = [rng.randrange(1000, 150000) for _ in range(rng.randrange(1, 30))]
        prompt = prompt if rng.random() < 0.7 else [11, 22, 33, 44] * 6 + prompt
        mode = rng.choice(["read", "disconnect", "abort", "stop"])
        params = SamplingParams(max_tokens=rng.randrange(1, 12), temperature=rng.choice([0.0, 0.8]), seed=i,
                                stop=["e", "a", " t"] if mode == "stop" else ())
        rid, text, last = f"r{i}", "", None
        stream = engine.generate(prompt, params, request_id=rid)
        async with contextlib.aclosing(stream):
            async for last in stream:
                text += last.text
                if mode == "disconnect" and rng.random() < 0.3:
                    break
                if mode == "abort" and rng.random() < 0.3:
                    engine.abort(rid)
        if last is not None and last.finish_reason is not None:
            ends[last.finish_reason] += 1
            if last.stop_string is not None:
                assert last.finish_reason == "stop" and last.stop_string not in text

    async def main():
        gate = asyncio.Semaphore(32)

        async def bounded(i):
            async with gate:
                await one(i)

        await asyncio.gather(*(bounded(i) for i in range(1000)))
        for _ in range(500):  # the last disconnects' aborts are still on their way
            if not engine.engine.has_unfinished():
                break
            await asyncio.sleep(0.01)

    try:
        asyncio.run(main())
        assert not engine.engine.has_unfinished() and engine.engine.scheduler.num_preemptions > 0
        assert ends["stop"] > 0 and ends["length"] > 0 and ends["abort"] > 0
        engine.engine.kv.cache.clear()
        assert engine.engine.kv.pool.is_empty()
    finally:
        engine.shutdown()
