"""The offline API with the real tokenizer: text in, text out, stop strings, padded vocabularies."""
import pytest

from zllm_core.engine.llm import LLM
from zllm_core.engine.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def llm():
    return LLM("zllm-demo", kv_cache_bytes=32 << 20)


def test_text_prompt_round_trips_through_the_tokenizer(llm):
    (out,) = llm.generate("Hello, caches!", SamplingParams(max_tokens=6, temperature=0.0))
    assert out.prompt_ids == llm.tokenizer.encode("Hello, caches!")
    assert out.text == llm.tokenizer.decode(out.token_ids)
    assert out.finish_reason == "length"


def test_stop_string_truncates_text_and_finishes_with_stop(llm):
    (free,) = llm.generate("Hello, caches!", SamplingParams(max_tokens=8, temperature=0.0))
    stop = free.text[3:6]
    (out,) = llm.generate("Hello, caches!", SamplingParams(max_tokens=8, temperature=0.0, stop=[stop]))
    assert out.finish_reason == "stop" and out.text == free.text[:free.text.index(stop)]


def test_padding_rows_of_the_output_head_are_never_sampled(llm):
    vocab = llm.tokenizer.vocab_size
    assert llm.engine.model.config.vocab_size > vocab  # Qwen pads its head past the tokenizer

    def favour_padding(tokens, row):
        row[vocab:] += 1000.0

    params = SamplingParams(max_tokens=16, temperature=1.0, seed=3, logits_hook=favour_padding)
    (out,) = llm.generate("x", params)
    assert max(out.token_ids) < vocab


def test_a_refused_prompt_in_a_batch_leaves_nothing_queued(llm):
    with pytest.raises(ValueError, match="at least one token"):
        llm.generate([[1000, 1001], []], SamplingParams(max_tokens=2))
    assert not llm.engine.has_unfinished()
    assert llm.generate("ok", SamplingParams(max_tokens=2, temperature=0.0))[0].finish_reason == "length"
