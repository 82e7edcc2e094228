"""Speculative decoding by prompt lookup: drafts verified in one pass change no greedy token,
keep the sampled distribution, and leave nothing behind."""
import collections

import numpy as np
import pytest
import torch
from engine_helpers import run_all

from zllm_core.engine.ngram_drafter import NgramDrafter
from zllm_core.engine.sampler import verify
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.sequence import Sequence

P = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.3, 0.2])  # the target distribution, every row
CHI2_5DF_P001 = 20.515  # chi-square with 5 degrees of freedom exceeds this with probability 0.001


def chi2(counts: collections.Counter, n: int) -> float:
    expected = (P * n).tolist()
    return sum((counts[k] - e) ** 2 / e for k, e in enumerate(expected))


def test_the_drafter_proposes_what_followed_the_latest_earlier_occurrence():
    d = NgramDrafter(4)
    tokens = np.array([5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 5, 6, 7], np.uint32)
    assert d.propose(tokens).tolist() == [1, 2, 5, 6]  # the later of two earlier matches
    grown = np.concatenate([tokens, [1, 2, 5]]).astype(np.uint32)  # the index grows with the tokens
    assert d.propose(grown).tolist() == [6, 7, 1, 2]
    assert d.propose(np.array([3, 4, 3, 4, 9], np.uint32)).tolist() == []  # no earlier 3-gram


def drawn(n: int, draft: list[int], temperature: float = 1.0, top_p: float = 1.0) -> list[tuple]:
    """n independent requests, each verifying `draft` against rows of P: their emitted tokens."""
    seqs = []
    for i in range(n):
        s = Sequence(f"s{i}", [0], SamplingParams(temperature=temperature, top_p=top_p), 0)
        s.generator = torch.Generator().manual_seed(i)
        seqs.append(s)
    logits = torch.log(P).repeat(n * (1 + len(draft)), 1)
    return [tuple(t) for t in verify(logits, seqs, [np.array(draft)] * n)]


@pytest.mark.parametrize("draft", [[4], [0], [5, 1]])
def test_sampled_tokens_keep_the_target_distribution_whatever_the_draft(draft):
    """The first token emitted is distributed as P whether the draft guesses a likely token, an
    unlikely one, or two; after an accepted first draft token, so is the second (chi-square)."""
    n = 20000
    out = drawn(n, draft)
    assert chi2(collections.Counter(t[0] for t in out), n) < CHI2_5DF_P001
    if len(draft) > 1:
        after = [t[1] for t in out if t[0] == draft[0]]
        assert chi2(collections.Counter(after), len(after)) < CHI2_5DF_P001


def test_top_p_applies_before_acceptance():
    """A draft token outside the nucleus is never accepted: the output follows P cut to top-p."""
    out = drawn(4000, [0], top_p=0.5)  # nucleus {4, 3}: 0.3 + 0.2 >= 0.5
    assert {t[0] for t in out} == {3, 4}


def test_greedy_accepts_the_draft_while_it_equals_the_argmax():
    seqs = [Sequence("g", [0], SamplingParams(temperature=0.0), 0)]
    logits = torch.log(P).repeat(4, 1)
    logits[1, 2] = 9.0  # the argmax after the first draft token is 2
    assert verify(logits, seqs, [np.array([4, 2, 1])]) == [[4, 2, 4]]
    assert verify(logits, seqs, [np.array([1, 2, 1])]) == [[4]]


LOOPING = SamplingParams(max_tokens=64, temperature=0.0)


def test_greedy_output_is_identical_with_and_without_speculation_on_the_demo_model(make_engine):
    """Random weights fall into loops, which prompt lookup drafts well: many drafts are
    accepted, and not one token differs."""
    rng = np.random.default_rng(5)
    prompts = [rng.integers(1000, 150000, int(rng.integers(5, 60))).tolist() for _ in range(8)]
    prompts += [[1000 + i % 7 for i in range(40)]]  # copy-heavy: the prompt repeats itself
    plain = run_all(make_engine(), prompts, LOOPING)
    engine = make_engine(speculative_tokens=4)
    assert run_all(engine, prompts, LOOPING) == plain
    stats = engine.spec_stats
    assert stats.accepted > 100 and stats.accepted < stats.drafted
    assert engine.metrics()["speculative"]["tokens_per_step"] > 1.5
    engine.kv.cache.clear()
    assert engine.kv.pool.is_empty()


def test_requests_with_hooks_or_logprobs_or_that_opt_out_are_never_drafted(make_engine):
    engine = make_engine(speculative_tokens=4)
    prompt = [1000 + i % 7 for i in range(40)]
    for params in (SamplingParams(max_tokens=24, temperature=0.0, logprobs=2),
                   SamplingParams(max_tokens=24, temperature=0.0, speculative=False),
                   SamplingParams(max_tokens=24, temperature=0.0, logits_hook=lambda ids, row: None)):
        run_all(engine, [prompt], params)
    assert engine.spec_stats.drafted == 0


def test_greedy_output_is_identical_with_and_without_speculation_on_agent_trace_calls(make_engine, agent_trace):
    """The tails of real agent calls (tool schemas, tool output, history), as the demo model's
    tokenizer and template render them."""
    from trace_replay import rendered_calls  # bench/, on sys.path from tests/conftest.py

    from zllm_core.dialects import ChatTemplate
    from zllm_core.model.model_names import resolve_model
    from zllm_core.tokenizer import Tokenizer

    model_dir = resolve_model("zllm-demo")
    tokenizer, template = Tokenizer.from_pretrained(model_dir), ChatTemplate.from_model_dir(model_dir)
    prompts = [tokenizer.encode(text, allowed_special="all")[-1500:]
               for _, text in rendered_calls(agent_trace, template, sessions=2, max_calls=2)]
    params = SamplingParams(max_tokens=32, temperature=0.0)
    engine = make_engine(speculative_tokens=4)
    assert run_all(engine, prompts, params) == run_all(make_engine(), prompts, params)
    assert engine.spec_stats.drafted > 0


def test_the_loop_guard_still_breaks_loops_on_drafted_steps(make_engine):
    """A prompt that repeats itself: the model loops and prompt lookup drafts the loop; each
    draft position is guarded on a clone, so the loop is broken and the turn ends in budget."""
    from zllm_core.fence.guard import GenerationGuard
    from zllm_core.fence.token_fence import TokenFence

    engine = make_engine(speculative_tokens=4)
    eos = tuple(engine.model.config.eos_token_ids)
    fence = TokenFence(None, 200, GenerationGuard(), vocab_size=engine.sampleable, end_ids=eos)
    prompt = [1000 + i % 7 for i in range(60)]
    (out,) = run_all(engine, [prompt], SamplingParams(max_tokens=200, temperature=0.0, fence=fence))
    assert engine.spec_stats.drafted > 0 and fence.guard.breaks > 0
    assert out[-1] in eos and len(out) < 200


def test_each_request_reports_its_own_drafts(make_engine):
    engine = make_engine(speculative_tokens=4)
    engine.add_request("copy", [1000 + i % 7 for i in range(40)], LOOPING)
    last = None
    while engine.has_unfinished():
        for last in engine.step():
            pass
    stats = engine.spec_stats
    assert last.finished and (last.drafted, last.accepted) == (stats.drafted, stats.accepted) and last.accepted > 0
