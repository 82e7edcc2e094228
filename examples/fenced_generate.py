"""A token fence in transformers' model.generate: sampled output that is always a valid call.

The model here is tiny and random (it knows nothing), so everything it writes comes from the
fence: the Hermes call syntax and arguments that satisfy the tool's JSON Schema."""
import json

import torch
import transformers

from zllm_core import FenceFactory, FenceVocab, FunctionTool, ToolChoice, Tokenizer, dialect_named
from zllm_core.adapters.transformers import FenceLogitsProcessor

END_IDS = (151645, 151643)  # Qwen2's <|im_end|> and <|endoftext|>
tokenizer = Tokenizer.from_family("qwen2")
model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
    vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
    num_key_value_heads=1, eos_token_id=list(END_IDS), pad_token_id=END_IDS[1])).eval()

tool = FunctionTool("read_file", None, {"type": "object", "properties": {"path": {"type": "string", "maxLength": 12}},
                                        "required": ["path"], "additionalProperties": False})
fences = FenceFactory("hermes", lambda tags: FenceVocab.for_tokenizer(tokenizer, END_IDS, tags))
fence = fences.for_request([tool], ToolChoice("required", parallel=False), None, in_reasoning=False, max_tokens=48)

prompt = torch.tensor([tokenizer.encode("<|im_start|>user\nRead a file.<|im_end|>\n<|im_start|>assistant\n",
                                        allowed_special="all")])
out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, top_k=0, max_new_tokens=49,
                     logits_processor=transformers.LogitsProcessorList([FenceLogitsProcessor(fence)]))
text = tokenizer.decode([t for t in out[0, prompt.shape[1]:].tolist() if t not in END_IDS])
(call,) = dialect_named("hermes").parse(text, "example", [tool]).tool_calls
print(call.name, json.loads(call.arguments))
