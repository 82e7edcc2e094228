import collections
import math

import torch

from zllm_core.engine.sampler import _inverse_cdf, apply_hooks, sample
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.sequence import Sequence


def seq(**params) -> Sequence:
    s = Sequence("s", [1], SamplingParams(**params), 0)
    if s.params.seed is not None:
        s.generator = torch.Generator().manual_seed(s.params.seed)
    return s


LOGITS = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]]))


def frequencies(n=4000, **params):
    s = seq(**params)
    counts = collections.Counter(sample(LOGITS.clone(), [s])[0] for _ in range(n))
    return [counts[i] / n for i in range(4)]


def test_temperature_one_samples_the_distribution():
    for got, want in zip(frequencies(), [0.1, 0.2, 0.3, 0.4]):
        assert math.isclose(got, want, abs_tol=0.03)


def test_top_k_keeps_the_k_most_likely():
    f = frequencies(top_k=2)
    assert f[0] == f[1] == 0 and math.isclose(f[3], 0.4 / 0.7, abs_tol=0.03)


def test_top_p_keeps_the_smallest_nucleus_reaching_p():
    f = frequencies(top_p=0.65)  # 0.4 + 0.3 reaches it; 0.4 alone does not
    assert f[0] == f[1] == 0 and f[2] > 0


def test_greedy_rows_and_hooks_in_one_batch():
    def forbid_best(tokens, row):
        row[3] = float("-inf")
    rows = LOGITS.repeat(2, 1)
    seqs = [seq(temperature=0.0), seq(temperature=0.0, logits_hook=forbid_best)]
    assert apply_hooks(rows, seqs) == {}
    assert sample(rows, seqs) == [3, 2]


def test_a_failing_hook_fails_only_its_row():
    def broken(tokens, row):
        raise RuntimeError("fence state lost")
    failed = apply_hooks(LOGITS.repeat(2, 1), [seq(), seq(logits_hook=broken)])
    assert list(failed) == [1] and "fence state lost" in str(failed[1])


def test_a_fully_masked_row_falls_back_to_argmax_instead_of_the_last_row():
    rows = torch.full((1, 4), float("-inf"))
    assert sample(rows, [seq(temperature=1.0)]) == [0]


def test_a_vanishing_temperature_is_greedy():
    assert seq(temperature=1e-40).params.greedy
    assert sample(LOGITS.clone(), [seq(temperature=1e-40)]) == [3]


def test_per_request_seed_fixes_the_draws():
    a, b = seq(seed=5), seq(seed=5)
    draws = [sample(LOGITS.repeat(2, 1), [a, b]) for _ in range(20)]
    assert all(x == y for x, y in draws)


def test_draws_across_blocks_follow_the_distribution_and_skip_masked_tokens():
    vocab = 5 * 1024 + 300  # the last block is short
    weights = {7: 0.1, 1023: 0.2, 1024: 0.15, 3000: 0.05, 5 * 1024 + 299: 0.5}
    row = torch.full((1, vocab), float("-inf"))
    for token, w in weights.items():
        row[0, token] = math.log(w)
    counts = collections.Counter(sample(row.repeat(2000, 1), [seq(seed=3)] * 2000))
    assert set(counts) <= set(weights)
    for token, w in weights.items():
        assert math.isclose(counts[token] / 2000, w, abs_tol=0.03)


def test_extreme_uniforms_land_on_tokens_with_mass():
    vocab = 3 * 1024
    x = torch.full((4, vocab), float("-inf"))
    x[:, 5], x[:, 2047] = 0.0, -3.0  # every other token, whole blocks included, has no mass
    u = torch.tensor([0.0, 1.0, 1 - 1e-17, 0.5], dtype=torch.float64)
    drawn = _inverse_cdf(x, u).tolist()
    assert drawn[0] == 5 and drawn[1] == drawn[2] == 2047 and drawn[3] == 5
