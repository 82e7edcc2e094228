"""Fences through the real engine: the random-weight demo model, sampling at temperature 1.0,
10 generations per schema batched together, every output valid after parsing: as JSON output,
and as a forced call's parameter in every dialect (the fence alone decides the syntax, so the
demo model's vocabulary serves them all)."""
import json

import jsonschema
import pytest

from tests.fence.schemas import AGENT_TOOLS, SUITE, as_parameter
from zllm_core.dialects.conversation import FunctionTool
from zllm_core.dialects.selection import dialect_named
from zllm_core.engine.llm import LLM
from zllm_core.engine.output_processor import OutputProcessor
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.fence.grammar import FenceVocab, Grammar
from zllm_core.fence.token_fence import TokenFence
from zllm_core.fence.tool_grammar import json_grammar, output_grammar, tags_for
from zllm_core.protocols.canonical import ToolChoice

PROMPT = "<|im_start|>user\nDo it.<|im_end|>\n<|im_start|>assistant\n"
MAX_TOKENS = 48
CALL_TOKENS = {"hermes": 64, "glm45": 64, "glm47": 64, "dsml": 128}  # DSML's tags are ~50 Qwen tokens a call
DIALECTS = tuple(CALL_TOKENS)


@pytest.fixture(scope="module", params=[0, 4], ids=["plain", "speculative"])
def llm(request):
    """Without and with speculation: every draft position is fenced on a clone, so the suite
    must pass unchanged with prompt-lookup drafts of 4 tokens."""
    return LLM("zllm-demo", kv_cache_bytes=256 << 20, max_num_seqs=256, speculative_tokens=request.param)


def vocab_for(llm, dialect: str) -> FenceVocab:
    tok = llm.tokenizer
    return FenceVocab.build([tok.token_bytes(i) for i in range(tok.vocab_size)], tok.special_tokens,
                            llm.engine.model.config.eos_token_ids, tags_for(dialect))


@pytest.fixture(scope="module")
def vocab(llm):
    return vocab_for(llm, "hermes")


def run(llm, grammars: dict, n=10, max_tokens=MAX_TOKENS) -> dict:
    """n generations per grammar, all batched together, each with its own fence:
    {name: [(text, finish reason), ...]}."""
    engine = llm.engine
    ids = llm.encode(PROMPT)
    processors = {}
    for name, grammar in grammars.items():
        for k in range(n):
            params = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=k,
                                    fence=TokenFence(grammar, max_tokens))
            engine.add_request(f"{name}/{k}", ids, params)
            processors[f"{name}/{k}"] = OutputProcessor(llm.tokenizer.decode_bytes)
    texts, reasons = {}, {}
    while len(reasons) < n * len(grammars):
        for out in engine.step():
            texts[out.request_id] = texts.get(out.request_id, "") + processors[out.request_id].process(out).text
            if out.finished:
                reasons[out.request_id] = out.finish_reason
    return {name: [(texts.get(f"{name}/{k}", ""), reasons[f"{name}/{k}"]) for k in range(n)] for name in grammars}


def test_json_output_is_valid_for_every_schema(llm, vocab):
    grammars = {name: Grammar.compile(json_grammar(s, False, vocab), vocab) for name, s in SUITE.items()}
    for name, outputs in run(llm, grammars).items():
        for text, reason in outputs:
            assert reason == "stop", (name, text)
            jsonschema.validate(json.loads(text), SUITE[name])


@pytest.mark.parametrize("name", DIALECTS)
def test_forced_calls_of_every_schema_and_auto_calls_are_valid(llm, name):
    """Each suite schema as the one parameter of a forced call, and `auto` over the agent tools."""
    dialect, vocab = dialect_named(name), vocab_for(llm, name)
    tools = {schema: [as_parameter(SUITE[schema])] for schema in SUITE}
    tools["auto"] = [FunctionTool(n, None, s) for n, s in AGENT_TOOLS.items()]
    grammars = {key: Grammar.compile(output_grammar(
        name, vocab, declared, ToolChoice("auto" if key == "auto" else "required", parallel=key == "auto"),
        False), vocab) for key, declared in tools.items()}
    for key, outputs in run(llm, grammars, max_tokens=CALL_TOKENS[name]).items():
        for text, reason in outputs:
            parsed = dialect.parse(text, "e", tools[key])
            assert reason == "stop" and not parsed.errors, (key, text)
            assert key == "auto" or len(parsed.tool_calls) == 1, (key, text)
            for call in parsed.tool_calls:
                declared = next(t for t in tools[key] if t.name == call.name)
                jsonschema.validate(json.loads(call.arguments), declared.parameters)
