"""Chat Completions, Responses and Messages on your own FastAPI app, over your own generate.

`generate` gets the exact prompt ids (rendered with the model's chat template, tokenized
incrementally) and streams GenerationEvents; zllm_core does the rest of each protocol."""
from importlib import resources

from fastapi import FastAPI
from fastapi.testclient import TestClient

from zllm_core import (ChatTemplate, GenerationEvent, PromptBuilder, ServerConfig, Tokenizer, dialect_named,
                       protocol_router)

tokenizer = Tokenizer.from_family("qwen2")
END = 151645  # <|im_end|>


async def generate(prompt_ids, params, *, request_id, cache):
    """Your runtime goes here (vLLM, SGLang, transformers, ...); this one always says hello."""
    ids = tokenizer.encode("Hello!")
    for n, token in enumerate(ids, 1):
        yield GenerationEvent([token], tokenizer.decode([token]), None, None, len(prompt_ids), 0, n)
    yield GenerationEvent([END], "", "stop", None, len(prompt_ids), 0, len(ids) + 1)


template = (resources.files("zllm_core.dialects") / "templates" / "qwen3.jinja").read_text()
prompts = PromptBuilder(ChatTemplate(template, dialect_named("hermes")), tokenizer)
app = FastAPI()
app.include_router(protocol_router(generate, prompts, ServerConfig(model_name="my-model"),
                                   max_model_len=32768, end_ids=[END]))

if __name__ == "__main__":  # `uvicorn examples.protocol_router:app` serves it; here, one request in-process
    with TestClient(app) as client:
        reply = client.post("/v1/chat/completions", json={
            "model": "my-model", "messages": [{"role": "user", "content": "Hi"}]}).json()
        print(reply["choices"][0]["message"]["content"])
