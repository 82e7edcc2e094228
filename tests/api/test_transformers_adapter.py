"""A fence in `transformers`' own `model.generate`: a tiny random Qwen2 model over the real Qwen2
vocabulary, sampling at temperature 1, must produce a Hermes call that parses and validates
under its JSON Schema for every one of 50 seeds."""
import json

import jsonschema
import pytest
import torch
import transformers

from zllm_core.adapters.transformers import FenceLogitsProcessor
from zllm_core.dialects import FunctionTool, dialect_named
from zllm_core.fence.factory import FenceFactory
from zllm_core.fence.grammar import FenceVocab
from zllm_core.protocols.canonical import ToolChoice
from zllm_core.tokenizer import Tokenizer

END_IDS = (151645, 151643)  # <|im_end|>, <|endoftext|>
MAX_TOKENS = 64
TOOL = FunctionTool("read_file", None, {
    "type": "object", "properties": {"path": {"type": "string", "maxLength": 12},
                                     "line": {"type": "integer", "minimum": 1}},
    "required": ["path"], "additionalProperties": False})
PROMPT = "<|im_start|>user\nRead the README.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A 32-wide model gains nothing from threads; on a loaded machine they cost 5x."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_family("qwen2")


@pytest.fixture(scope="module")
def model() -> transformers.PreTrainedModel:
    config = transformers.Qwen2Config(vocab_size=151936, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                      tie_word_embeddings=True, eos_token_id=list(END_IDS),
                                      pad_token_id=END_IDS[1])
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def fences(tokenizer) -> FenceFactory:
    return FenceFactory("hermes", lambda tags: FenceVocab.for_tokenizer(tokenizer, END_IDS, tags))


@pytest.mark.parametrize("seed", range(50))
def test_sampled_generate_under_the_fence_parses_a_valid_call(model, tokenizer, fences, seed):
    fence = fences.for_request([TOOL], ToolChoice("required", parallel=False), None, False, MAX_TOKENS)
    prompt = torch.tensor([tokenizer.encode(PROMPT, allowed_special="all")])
    torch.manual_seed(seed)
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, temperature=1.0,
                         top_k=0, max_new_tokens=MAX_TOKENS + 1,
                         logits_processor=transformers.LogitsProcessorList([FenceLogitsProcessor(fence)]))
    generated = out[0, prompt.shape[1]:].tolist()
    assert generated[-1] in END_IDS, "the fence closes the call within its budget, then ends the turn"
    text = tokenizer.decode(generated[:-1])
    parsed = dialect_named("hermes").parse(text, "t", [TOOL])
    assert not parsed.errors and len(parsed.tool_calls) == 1, text
    call = parsed.tool_calls[0]
    assert call.name == "read_file"
    jsonschema.validate(json.loads(call.arguments), TOOL.parameters)
