"""Token-exact history through the real server (issue 21): a resent answer keeps the ids the
model generated, so every turn's prompt is the previous prompt + its generated tokens and the
prefix cache covers all of it.

The server is the real app under uvicorn with the real engine and demo model, driven by the
official SDKs. Below the server, each request's sampling gets a logits hook that forces a
scripted answer written in non-canonical tokens (a word split into pieces the tokenizer would
merge, a character split into its UTF-8 bytes): re-tokenizing such an answer gives other ids.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

import anthropic
import numpy as np
import openai
import pytest
import torch

from tests.server.in_process import serving
from zllm_core.engine.async_engine import AsyncEngine
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.model.model_names import resolve_model
from zllm_core.server import body
from zllm_core.server.app import create_app
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.resent_body import ResentBodies
from zllm_core.server.runtime import ServerConfig

MODEL = "zllm-demo"
BLOCK = 16
TURNS = 3
# Long enough (past the tokenizer's first 4K-character checkpoint) for a keyless request to
# find its conversation by the text it shares.
SYSTEM = "You are a coding agent. " + " ".join(f"Rule {i}: keep file {i} tidy and tested." for i in range(150))


def non_canonical(tokenizer, turn: int) -> list[int]:
    """An answer whose ids re-tokenize differently: 'hel' + 'lo' (canonically 'hello'), and
    'é' as its two UTF-8 bytes; ended by the model's end of turn."""
    pieces = [tokenizer.encode(p) for p in ("hel", "lo", " wor", "ld", f" {turn}", " caf")]
    utf8 = [byte_token(tokenizer, b) for b in (0xC3, 0xA9)]
    return [i for p in pieces for i in p] + utf8 + tokenizer.encode("!") + tokenizer.encode(
        "<|im_end|>", allowed_special="all")


def byte_token(tokenizer, byte: int) -> int:
    return next(i for i in range(tokenizer.vocab_size) if tokenizer.token_bytes(i) == bytes([byte]))


@dataclass
class Turn:
    prompt: np.ndarray
    answer: list[int]
    first_logits: torch.Tensor | None = None


@dataclass
class ScriptedEngine:
    """The real AsyncEngine; each request's answer forced by a logits hook, its prompt and
    first-step logits kept for the checks."""

    engine: AsyncEngine
    script: list[list[int]] = field(default_factory=list)  # the next requests' answers
    turns: list[Turn] = field(default_factory=list)

    def __getattr__(self, name):
        return getattr(self.engine, name)

    async def generate(self, prompt_ids, params: SamplingParams, request_id=None, cache=None):
        turn = Turn(np.array(prompt_ids), self.script.pop(0))
        self.turns.append(turn)
        forced = replace(params, logits_hook=_forcing(turn), max_tokens=len(turn.answer))
        async for event in self.engine.generate(prompt_ids, forced, request_id, cache):
            yield event


def _forcing(turn: Turn):
    def hook(tokens, row):
        step = len(tokens) - len(turn.prompt)
        if step == 0:
            turn.first_logits = row.clone()
        forced = turn.answer[step]
        row.fill_(float("-inf"))
        row[forced] = 0.0
    return hook


@pytest.fixture(scope="module")
def live():
    # Every body, however small, is parsed from where it stops resending (resent_body.py),
    # so the SDKs' real bodies of all three protocols take that path here.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(body, "RESENT", ResentBodies(min_bytes=0))
        yield from _live()


def _live():
    model_dir = resolve_model(MODEL)
    engine = ScriptedEngine(AsyncEngine.from_model(str(model_dir)))
    app = create_app(engine, PromptBuilder.from_model_dir(model_dir, engine.tokenizer),
                     ServerConfig(model_name=MODEL))
    with serving(app) as url:
        yield engine, url
    engine.engine.shutdown()


def chat_turn(url, system, history):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": system}, *history],
                                           temperature=0.0)
    return reply.choices[0].message.content, reply.usage.prompt_tokens_details.cached_tokens


def responses_turn(url, system, history):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    reply = client.responses.create(model=MODEL, instructions=system, input=history, temperature=0.0)
    return reply.output_text, reply.usage.input_tokens_details.cached_tokens


def messages_turn(url, system, history):
    client = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)
    reply = client.messages.create(model=MODEL, system=system, messages=history, max_tokens=64)
    return reply.content[0].text, reply.usage.cache_read_input_tokens


@pytest.mark.parametrize("ask", [chat_turn, responses_turn, messages_turn])
def test_every_turn_hits_the_previous_prompt_and_its_generated_tokens(live, ask):
    engine, url = live
    tok = engine.tokenizer
    system = f"[{ask.__name__}] {SYSTEM}"  # a conversation of its own per protocol
    engine.turns.clear()
    engine.script[:] = [non_canonical(tok, t) for t in range(TURNS)]
    history, cached, hits = [], [], body.RESENT.hits
    for t in range(TURNS):
        history.append({"role": "user", "content": f"Step {t}: run the checks."})
        text, hit = ask(url, system, history)
        history.append({"role": "assistant", "content": text})
        cached.append(hit)
    assert body.RESENT.hits - hits == TURNS - 1
    turns = engine.turns
    for t in range(TURNS):
        answer = turns[t].answer
        assert tok.encode(tok.decode(answer), allowed_special="all") != answer  # truly non-canonical
    for prev, turn, hit in zip(turns, turns[1:], cached[1:]):
        seen = np.concatenate((prev.prompt, prev.answer))
        assert np.array_equal(turn.prompt[:len(seen)], seen)
        # Every token but the last answer token has K/V (the model never ran on that one).
        assert hit == (len(seen) - 1) // BLOCK * BLOCK
    for turn in turns:
        reference = full_prefill_logits(engine.engine, turn.prompt)
        real = reference.isfinite()  # the output head's padding rows are -inf in both
        assert torch.equal(real, turn.first_logits.isfinite())
        assert (turn.first_logits[real] - reference[real]).abs().max() <= 1e-4


def full_prefill_logits(engine: AsyncEngine, prompt: np.ndarray) -> torch.Tensor:
    """The last position's logits from a prefill that reads no cached state."""
    seen = []

    async def run():
        params = SamplingParams(max_tokens=1, temperature=0.0, logits_hook=lambda _, row: seen.append(row.clone()))
        async for _ in engine.generate(prompt, params, cache=None):
            pass
    asyncio.run(run())
    return seen[0]
