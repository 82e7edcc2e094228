"""The routing policy and the replicas' summaries, without Ray: real chained block keys from the
engines' hash, exact matches at level 0, sampled ones to their resolution, pins, balance."""
from __future__ import annotations

import numpy as np

from zllm_core.cache.block_hash import chain_keys
from zllm_core.cache.scope import CacheHint, Scope
from zllm_core.cluster.policy import AffinityPolicy, Balance, ReplicaView, RouteKeys
from zllm_core.cluster.summary import BlockSummary

KEYS = RouteKeys(Scope("model", "tokenizer"), 16, "sha256")


def tokens(n, seed):
    return np.random.default_rng(seed).integers(0, 50_000, n).astype(np.int32)


def resident(ids, tenant=""):
    """The chained keys an engine holding `ids` (for `tenant`) has indexed."""
    return chain_keys(ids, 16, CacheHint(tenant).scope(KEYS.scope).digest())


def test_a_summary_matches_the_held_prefix_exactly_when_it_is_small():
    shared = tokens(160, 1)
    held = BlockSummary.of(resident(np.concatenate([shared, tokens(320, 2)])))
    assert held.level == 0 and held.num_keys == 30
    mine = KEYS.route(np.concatenate([shared, tokens(100, 3)]), CacheHint())
    assert held.match(mine.words) == 10
    assert held.match(KEYS.route(tokens(200, 4), CacheHint()).words) == 0
    # Another tenant's keys never match: the scope is in every key.
    assert held.match(KEYS.route(np.concatenate([shared, tokens(9, 5)]), CacheHint("other")).words) == 0


def test_a_large_summary_is_bounded_and_matches_to_its_resolution():
    ids = tokens(16 * 20_000, 6)
    held = BlockSummary.of(resident(ids), max_keys=512)
    assert held.num_keys <= 512 and held.blocks == 20_000 and held.level >= 5
    route = RouteKeys(KEYS.scope, 16, "sha256", window_blocks=20_000).route(ids[:16 * 12_000 + 1], CacheHint())
    step = 1 << held.level
    assert 12_000 - 8 * step <= held.match(route.words) <= 12_000


def test_the_router_keys_only_the_window_and_never_the_final_token():
    assert len(KEYS.route(tokens(16 * 3, 7), CacheHint()).words) == 2
    short = RouteKeys(KEYS.scope, 16, "sha256", window_blocks=4)
    assert len(short.route(tokens(16 * 100, 7), CacheHint()).words) == 4


def test_longest_prefix_wins_then_load_then_the_emptier_replica():
    system = tokens(320, 8)
    a = BlockSummary.of(resident(np.concatenate([system, tokens(64, 9)])))
    b = BlockSummary.of(resident(system[:160]))
    policy = AffinityPolicy()
    route = KEYS.route(np.concatenate([system, tokens(50, 10)]), CacheHint())
    assert policy.choose(route, {"a": ReplicaView(3, a), "b": ReplicaView(0, b)})[0] == "a"
    assert policy.choose(route, {"a": ReplicaView(3, a), "b": ReplicaView(0, a)})[0] == "b"
    busy, idle = BlockSummary.of(resident(tokens(999, 11))), BlockSummary.of([])
    cold = KEYS.route(tokens(100, 12), CacheHint())
    assert policy.choose(cold, {"a": ReplicaView(0, busy), "b": ReplicaView(0, idle)})[0] == "b"


def test_overload_makes_locality_yield_to_balance():
    system = tokens(320, 13)
    held = BlockSummary.of(resident(system))
    route = KEYS.route(np.concatenate([system, tokens(40, 14)]), CacheHint())
    policy = AffinityPolicy(Balance(absolute=4, relative=1.5))
    assert policy.choose(route, {"a": ReplicaView(5, held), "b": ReplicaView(2, None)})[0] == "a"
    assert policy.choose(route, {"a": ReplicaView(6, held), "b": ReplicaView(2, None)})[0] == "b"
    assert policy.decisions["balanced"] == 1


def test_a_conversation_follows_its_pin_until_that_replica_is_gone_or_overloaded():
    policy = AffinityPolicy(Balance(absolute=4))
    route = KEYS.route(tokens(100, 15), CacheHint("t", "conv-1"))
    views = {"a": ReplicaView(0, None), "b": ReplicaView(0, None)}
    policy.routed(route, "b")
    assert [policy.choose(route, views)[0] for _ in range(4)] == ["b"] * 4
    assert policy.choose(route, {"a": ReplicaView(0, None), "b": ReplicaView(9, None)})[0] == "a"
    assert policy.choose(route, {"a": ReplicaView(0, None), "c": ReplicaView(0, None)})[0] in ("a", "c")
    other_tenant = KEYS.route(tokens(100, 15), CacheHint("u", "conv-1"))
    assert policy.decisions["pinned"] == 4 and policy.choose(other_tenant, views)[0] in ("a", "b")


def test_exact_ties_rotate_so_idle_replicas_share_new_conversations():
    policy = AffinityPolicy()
    views = {r: ReplicaView(0, None) for r in "abcd"}
    firsts = [policy.choose(KEYS.route(tokens(40, 20 + i), CacheHint()), views)[0] for i in range(8)]
    assert sorted(set(firsts)) == ["a", "b", "c", "d"]
