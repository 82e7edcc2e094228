"""Token fences against xgrammar and llguidance, same run, same vocabulary, same schemas.

The Qwen2 vocabulary (151,643 tokens + specials), every schema of the fence's test suite that
all three accept, json.dumps' layout for all three (separators ", " and ": ", no free
whitespace), so each enforces the same language. Per schema:
- compile: a fresh compile (xgrammar's cache off; llguidance's matcher construction);
- mask per token: one valid token sequence (drawn from our fence with random choices) is
  replayed through each library, timing the mask for every position; ours cold (a fresh
  grammar: masks computed on first visit) and warm (the grammar's second request).
Prints p50/p99 per token and compile times with ratios (peer / ours: above 1, ours is faster).
Then a coding agent's tool set (the suite's agent tools, 20 of them): our forced-call grammar per
dialect, against the peers compiling the JSON Schema of one Hermes call's body (an anyOf of
{"name": const, "arguments": schema}), the same language as our Hermes grammar between its tags.

    PYTHONPATH=$PWD python bench/fence.py [--sequences 4] [--max-tokens 96]
Needs `pip install xgrammar llguidance` (the `bench` extra).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import llguidance  # noqa: E402
import llguidance.numpy as llg_numpy  # noqa: E402
import llguidance.tiktoken as llg_tiktoken  # noqa: E402
import xgrammar  # noqa: E402

from tests.fence.conftest import END_IDS, RandomLogits  # noqa: E402
from tests.fence.schemas import AGENT_TOOLS, SUITE  # noqa: E402
from tests.tokenizer.references import tiktoken_encoding  # noqa: E402
from zllm_core.fence.grammar import FenceVocab, Grammar  # noqa: E402
from zllm_core.fence.token_fence import TokenFence  # noqa: E402
from zllm_core.dialects.conversation import FunctionTool  # noqa: E402
from zllm_core.fence.tool_grammar import json_grammar, output_grammar, tags_for  # noqa: E402
from zllm_core.protocols.canonical import ToolChoice  # noqa: E402
from zllm_core.tokenizer import Tokenizer  # noqa: E402

SKIP = {"pattern_search"}  # JSON Schema's unanchored search: the peers anchor patterns


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f}"


class Ours:
    name = "zllm_core"

    def __init__(self, tok: Tokenizer):
        self.vocab = FenceVocab.build([tok.token_bytes(i) for i in range(tok.vocab_size)],
                                      tok.special_tokens, END_IDS)

    def compile(self, schema: dict) -> Grammar:
        return Grammar.compile(json_grammar(schema, False, self.vocab), self.vocab)

    def replay(self, grammar: Grammar, tokens: list[int]) -> list[float]:
        fence, times = TokenFence(grammar, 10**6), []  # a budget that never binds: masks alone
        for t in tokens:
            start = time.perf_counter()
            fence.bitmask()
            times.append(time.perf_counter() - start)
            fence.advance(t)
        return times


class XGrammar:
    name = "xgrammar"

    def __init__(self, tok: Tokenizer):
        vocab = [tok.token_bytes(i) for i in range(tok.vocab_size)]
        info = xgrammar.TokenizerInfo(vocab, xgrammar.VocabType.RAW, vocab_size=tok.vocab_size,
                                      stop_token_ids=list(END_IDS))
        self.compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        self.bitmask = xgrammar.allocate_token_bitmask(1, tok.vocab_size)

    def compile(self, schema: dict):
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                                 separators=(", ", ": "))

    def replay(self, compiled, tokens: list[int]) -> list[float] | None:
        matcher, times = xgrammar.GrammarMatcher(compiled), []
        for t in tokens:
            start = time.perf_counter()
            matcher.fill_next_token_bitmask(self.bitmask)
            times.append(time.perf_counter() - start)
            if not matcher.accept_token(t):
                return None
        return times


class LLGuidance:
    name = "llguidance"

    def __init__(self, tok: Tokenizer):
        self.tokenizer = llg_tiktoken.lltokenizer_from_encoding(tiktoken_encoding("qwen2"), eos_token=list(END_IDS))
        self.bitmask = llg_numpy.allocate_token_bitmask(1, self.tokenizer.vocab_size)

    def compile(self, schema: dict):
        layout = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
        grammar = llguidance.grammar_from("json_schema", json.dumps({**schema, "x-guidance": layout}))
        matcher = llguidance.LLMatcher(self.tokenizer, grammar)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return grammar

    def replay(self, grammar: str, tokens: list[int]) -> list[float] | None:
        matcher, times = llguidance.LLMatcher(self.tokenizer, grammar), []
        for t in tokens:
            start = time.perf_counter()
            llg_numpy.fill_next_token_bitmask(matcher, self.bitmask, 0)
            times.append(time.perf_counter() - start)
            if not matcher.consume_token(t):
                return None
        return times


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sequences", type=int, default=4, help="token sequences replayed per schema")
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = Tokenizer.from_family("qwen2")
    ours, peers = Ours(tok), [XGrammar(tok), LLGuidance(tok)]
    schemas = {k: v for k, v in SUITE.items() if k not in SKIP}
    compile_s = {lib.name: [] for lib in [ours, *peers]}
    masks = {name: [] for name in ("zllm_core cold", "zllm_core warm", *(p.name for p in peers))}
    rejected = {p.name: 0 for p in peers}
    print(f"{'schema':>16} {'ours ms':>9} " + " ".join(f"{p.name + ' ms':>14}" for p in peers))
    for name, schema in schemas.items():
        try:
            compiled = [timed(p.compile, schema) for p in peers]
        except (ValueError, RuntimeError) as exc:  # the same schemas for all: skip what one refuses
            print(f"{name:>16} skipped: {str(exc).splitlines()[0][:70]}")
            continue
        t_ours, grammar = timed(ours.compile, schema)
        compile_s["zllm_core"].append(t_ours)
        for p, (t, _) in zip(peers, compiled):
            compile_s[p.name].append(t)
        print(f"{name:>16} {ms(t_ours):>9} " + " ".join(f"{ms(t):>14}" for t, _ in compiled))
        sampler = RandomLogits(seed=len(name))
        fresh = ours.compile(schema)  # cold masks for the replay, independent of the sampling
        for _ in range(args.sequences):
            tokens, _ = sampler.generate(TokenFence(grammar, args.max_tokens))
            masks["zllm_core cold"] += ours.replay(fresh, tokens)
            masks["zllm_core warm"] += ours.replay(fresh, tokens)
            for p, (_, c) in zip(peers, compiled):
                times = p.replay(c, tokens)
                if times is None:
                    rejected[p.name] += 1
                else:
                    masks[p.name] += times
    report(compile_s, masks, rejected)
    tool_sets(tok, peers)


def tool_sets(tok: Tokenizer, peers: list) -> None:
    tools = [FunctionTool(f"{n}_{k}", None, s) for k in range(4) for n, s in AGENT_TOOLS.items()]
    body = {"anyOf": [{"type": "object", "properties": {"name": {"const": t.name}, "arguments": t.parameters},
                       "required": ["name", "arguments"], "additionalProperties": False} for t in tools]}
    print(f"\n{len(tools)} tools, tool_choice required: compile (s)")
    ours = {}
    for dialect in ("hermes", "glm47", "dsml"):
        vocab = FenceVocab.build([tok.token_bytes(i) for i in range(tok.vocab_size)], tok.special_tokens,
                                 END_IDS, tags_for(dialect))
        ours[dialect], grammar = timed(lambda: Grammar.compile(
            output_grammar(dialect, vocab, tools, ToolChoice("required"), False), vocab))
        print(f"{'zllm_core ' + dialect:>18} {ours[dialect]:8.3f}   {len(grammar.dfa.table) - 1} DFA states")
    for p in peers:
        t, _ = timed(p.compile, body)
        print(f"{p.name + ' (one call)':>18} {t:8.3f}   x{t / ours['hermes']:6.2f} of ours (hermes)")


def report(compile_s: dict, masks: dict, rejected: dict) -> None:
    ours_compile = np.median(compile_s["zllm_core"])
    print("\ncompile (median over schemas)")
    for name, values in compile_s.items():
        print(f"{name:>16} {ms(np.median(values))} ms   x{np.median(values) / ours_compile:6.2f} of ours")
    print("\nmask per token (us)      p50      p99     max   tokens   p50 ratio vs ours warm / cold")
    warm, cold = (np.percentile(masks[k], 50) for k in ("zllm_core warm", "zllm_core cold"))
    for name, values in masks.items():
        v = np.array(values) * 1e6
        print(f"{name:>16} {np.percentile(v, 50):8.1f} {np.percentile(v, 99):8.1f} {v.max():8.0f} "
              f"{len(v):8d}   x{np.percentile(v, 50) / 1e6 / warm:6.2f} / x{np.percentile(v, 50) / 1e6 / cold:6.2f}")
    print(f"sequences a peer refused (its layout differs): {rejected}")


if __name__ == "__main__":
    main()
