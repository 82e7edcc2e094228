"""The device-tier prefix cache on a real pool: keys, scopes, references, eviction, lookup order."""
import hashlib
import random
from array import array
from itertools import takewhile

import pytest

from zllm_core.cache.block_hash import chain_keys
from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.prefix_cache import CacheRequest, PrefixCache
from zllm_core.cache.scope import CacheHint, Scope
from zllm_core.cache.token_ids import token_array

BS = 4
SCOPE_A = Scope("model-a").digest()
SCOPE_B = Scope("model-a", tenant="other").digest()


def run_request(cache: PrefixCache, rid: str, tokens: list[int], scope: bytes = SCOPE_A,
                cache_id: str | None = None, finish: bool = True):
    """What the scheduler and engine do for one request whose prompt is fully prefilled."""
    hit = cache.match(rid, tokens, CacheRequest(scope, cache_id))
    pool = cache.pool
    table = hit.blocks.tolist() + pool.allocate(-(-len(tokens) // BS) - len(hit.blocks))
    cache.commit(rid, tokens, table, len(tokens))
    if finish:
        pool.free(table)
        cache.release(rid, table, tokens)
    return hit, table


def test_native_chain_matches_sha256_of_parent_scope_and_tokens():
    keys = chain_keys(list(range(8)), 4, b"scope")
    first = hashlib.sha256(b"scope" + array("i", range(4)).tobytes()).digest()
    assert keys[0] == first
    assert keys[1] == hashlib.sha256(first + b"scope" + array("i", range(4, 8)).tobytes()).digest()
    assert chain_keys(list(range(7)), 4, b"scope") == keys[:1]  # partial blocks have no key
    assert len(chain_keys(list(range(8)), 4, b"s", algo="fast128")[0]) == 16


def test_unchained_block_keys_would_share_a_block_across_different_histories():
    a = [1, 2, 3, 4, 9, 9, 9, 9]
    b = [5, 6, 7, 8, 9, 9, 9, 9]
    unchained = [chain_keys(x[4:], 4, SCOPE_A)[0] for x in (a, b)]
    chained = [chain_keys(x, 4, SCOPE_A)[1] for x in (a, b)]
    assert unchained[0] == unchained[1]  # the tempting key hands b the K/V computed after a's history
    assert chained[0] != chained[1]


def test_a_second_scope_never_hits():
    cache = PrefixCache(BlockPool(32, BS))
    tokens = list(range(20))
    run_request(cache, "a", tokens)
    assert run_request(cache, "b", tokens, scope=SCOPE_B)[0].kind == "cold"
    assert run_request(cache, "c", tokens)[0].num_tokens == 16


def test_match_never_covers_the_final_prompt_token():
    cache = PrefixCache(BlockPool(32, BS))
    tokens = list(range(16))  # exactly four blocks
    run_request(cache, "a", tokens)
    hit, _ = run_request(cache, "b", tokens)
    assert hit.num_tokens == 12 and hit.kind == "longest_prefix"


def test_shared_blocks_carry_one_reference_per_user_plus_the_index():
    pool = BlockPool(32, BS)
    cache = PrefixCache(pool)
    prefix = list(range(12))
    _, t1 = run_request(cache, "a", prefix + [100, 101], finish=False)
    _, t2 = run_request(cache, "b", prefix + [200, 201], finish=False)
    shared = t1[:3]
    assert t2[:3] == shared
    assert all(pool.ref_counts[b] == 3 for b in shared)  # two users + the index
    for rid, table, tail in (("a", t1, [100, 101]), ("b", t2, [200, 201])):
        pool.free(table)
        cache.release(rid, table, prefix + tail)
    assert all(pool.ref_counts[b] == 1 for b in shared)
    cache.clear()
    assert pool.is_empty()


def test_eviction_takes_unused_blocks_tail_first_and_never_one_in_use():
    pool = BlockPool(32, BS)
    cache = PrefixCache(pool)
    _, done = run_request(cache, "a", list(range(12)) + [0])
    _, busy = run_request(cache, "b", list(range(50, 62)) + [0], finish=False)
    assert cache.evict(1) == 1
    assert pool.ref_counts[done[2]] == 0 and pool.ref_counts[done[0]] == 1  # tail went first
    assert cache.evict(100) == 2  # the rest of "a"; "b"'s blocks are in use
    assert all(pool.ref_counts[b] == 2 for b in busy[:3])


def test_exact_cache_id_is_verified_against_the_tokens():
    cache = PrefixCache(BlockPool(64, BS))
    first = list(range(20))
    run_request(cache, "a", first, cache_id="conv-1")
    hit, _ = run_request(cache, "b", first + [7, 7, 7, 7, 7], cache_id="conv-1")
    assert hit.kind == "exact_id" and hit.num_tokens == 20
    liar = [99] * 25  # same id, different conversation: the id is a hint, not proof
    hit, _ = run_request(cache, "c", liar, cache_id="conv-1")
    assert hit.kind == "cold" and hit.num_tokens == 0
    assert dict(cache.stats.lookups) == {"cold": 2, "exact_id": 1}


def test_an_id_two_conversations_share_still_finds_the_longest_prefix():
    cache = PrefixCache(BlockPool(64, BS))
    system = list(range(8))
    a, b = system + [1] * 12, system + [2] * 12
    run_request(cache, "a", a, cache_id="shared")
    run_request(cache, "b", b, cache_id="shared")  # now the id's latest state
    hit, _ = run_request(cache, "a2", a + [3] * 4, cache_id="shared")
    assert hit.kind == "longest_prefix" and hit.num_tokens == 20


def test_a_session_naming_another_requests_block_evicted_while_it_ran_adopts_nothing_free():
    """Two requests compute the same blocks; the second's commit finds the first's indexed and
    its session names those. Evicted before the session is recorded, they must not be adopted
    by the next turn (they are free, or someone else's)."""
    cache = PrefixCache(BlockPool(16, BS))
    pool, tokens = cache.pool, list(range(9))
    for rid in ("a", "b"):
        cache.match(rid, tokens, CacheRequest(SCOPE_A, rid))
    ta, tb = pool.allocate(3), pool.allocate(3)
    cache.commit("a", tokens, ta, 8)
    cache.commit("b", tokens, tb, 8)  # the keys are a's: b's own copies stay private
    pool.free(ta)
    cache.release("a", ta)  # aborted: no session, its two indexed blocks unused
    assert cache.evict(2) == 2
    pool.free(tb)
    cache.release("b", tb, tokens)
    hit = cache.match("c", tokens + [1], CacheRequest(SCOPE_A, "b"))
    assert hit.kind == "cold" and not len(hit.blocks)
    cache.release("c", [])
    cache.clear()
    assert pool.is_empty()


def test_cache_hint_scopes_by_tenant():
    base = Scope("m", "t")
    assert CacheHint(tenant="x").scope(base).digest() != CacheHint(tenant="y").scope(base).digest()
    assert CacheHint(tenant="x").scope(base).digest() != CacheHint().scope(base).digest()
    assert CacheHint(cache_id="k").scope(base).digest() == CacheHint().scope(base).digest()


def test_near_miss_is_logged_with_position_and_both_sides(caplog):
    cache = PrefixCache(BlockPool(1024, BS), describe=lambda ids: " ".join(map(str, ids)))
    history = list(range(1200))
    run_request(cache, "a", history)
    forked = history[:1100] + [-1] + history[1101:] + [5, 5]
    with caplog.at_level("WARNING", logger="zllm.cache"):
        run_request(cache, "b", forked)
    assert cache.stats.near_misses == 1
    miss = cache.near_misses[-1]
    assert miss.position == 1100 and "-1" in miss.ours and "1100" in miss.theirs
    assert "near-miss at token 1100" in caplog.text


def test_round_limit_drops_old_terminal_states_but_not_shared_blocks():
    cache = PrefixCache(BlockPool(256, BS), max_rounds=2)
    tokens = list(range(8))
    for turn in range(4):
        tokens = tokens + [turn] * 8
        run_request(cache, f"t{turn}", tokens, cache_id="conv")
    assert len(cache.sessions) == 2
    hit, _ = run_request(cache, "next", tokens + [1], cache_id="conv")
    assert hit.num_tokens == len(tokens)


def test_a_forgotten_id_loses_its_terminal_states_but_not_its_blocks():
    cache = PrefixCache(BlockPool(256, BS))
    tokens = list(range(24))
    for turn in range(2):
        run_request(cache, f"t{turn}", tokens[:16 + 8 * turn], cache_id="conv")
    run_request(cache, "other", tokens, scope=SCOPE_B, cache_id="conv")  # another tenant's id
    cache.forget(CacheRequest(SCOPE_A, "conv"))
    assert cache.sessions.latest(SCOPE_A, "conv") is None and len(cache.sessions) == 1
    assert cache.sessions.latest(SCOPE_B, "conv") is not None
    hit, _ = run_request(cache, "next", tokens + [1], cache_id="conv")
    assert hit.num_tokens == len(tokens) and hit.kind == "longest_prefix"  # found by its keys alone


@pytest.mark.parametrize("algo", ["sha256", "fast128"])
def test_both_hash_algorithms_serve_hits(algo):
    cache = PrefixCache(BlockPool(32, BS), hash_algo=algo)
    run_request(cache, "a", list(range(10)))
    assert run_request(cache, "b", list(range(10)))[0].num_tokens == 8


def test_keyless_lookup_reuses_the_closest_sessions_keys_and_hashes_only_the_rest():
    cache = PrefixCache(BlockPool(64, BS))
    history = list(range(100, 140))  # ten full blocks
    run_request(cache, "turn1", history)
    hashed = cache.stats.hashed_blocks
    hit = cache.match("turn2", history + list(range(9)), CacheRequest(SCOPE_A))
    assert hit.num_tokens == 40 and hit.kind == "longest_prefix"
    assert cache.stats.hashed_blocks - hashed == 2  # the two new usable blocks, not twelve


def test_keyless_lookup_finds_blocks_another_branch_registered_past_the_closest_session():
    cache = PrefixCache(BlockPool(64, BS))
    prefix, theirs = list(range(8)), list(range(50, 66))
    run_request(cache, "done", prefix + [7] * 8)  # a session sharing two blocks
    _, running = run_request(cache, "running", prefix + theirs, finish=False)  # no session yet
    hit = cache.match("next", prefix + theirs + [1, 2, 3], CacheRequest(SCOPE_A))
    assert hit.blocks.tolist() == running[:6] and hit.num_tokens == 24


def reference_match(cache: PrefixCache, tokens: list[int], scope: bytes):
    """What a keyless match must find: the leading indexed run of every usable block's key, and
    the recent session sharing the most tokens (the newest among equals)."""
    usable = (len(tokens) - 1) // BS
    blocks = cache.index.lookup(chain_keys(tokens[:usable * BS], BS, scope))
    shares = [(sum(1 for _ in takewhile(lambda p: p[0] == p[1], zip(token_array(s.tokens).tolist(), tokens))), s)
              for s in cache.sessions.recent(scope)]
    parent = max(shares, key=lambda pair: pair[0], default=(0, None))[1]
    return blocks, parent.serial if parent is not None and blocks else None


@pytest.mark.parametrize("seed", range(4))
def test_keyless_matches_equal_hashing_every_block_and_comparing_every_session(seed):
    rng = random.Random(seed)
    cache = PrefixCache(BlockPool(4096, BS))
    convs: list[list[int]] = [[rng.randrange(4) for _ in range(rng.randrange(1, 30))]]
    running = []
    for turn in range(60):
        base = rng.choice(convs)
        cut = rng.randrange(len(base) + 1) if rng.random() < 0.3 else len(base)
        tokens = base[:cut] + [rng.randrange(4) for _ in range(rng.randrange(1, 12))]
        blocks, parent = reference_match(cache, tokens, SCOPE_A)
        finish = rng.random() < 0.8  # the others stay running: registered, but no session yet
        hit, table = run_request(cache, f"r{turn}", tokens, finish=finish)
        assert hit.blocks.tolist() == blocks, turn
        if finish:
            assert next(cache.sessions.recent(SCOPE_A)).parent == parent, turn
        else:
            running.append((f"r{turn}", table))
        convs.append(tokens)
    for rid, table in running:
        cache.pool.free(table)
        cache.release(rid, table)


def test_eviction_follows_each_blocks_latest_release():
    pool = BlockPool(32, BS)
    cache = PrefixCache(pool)
    _, first = run_request(cache, "first", list(range(12)) + [0])
    _, second = run_request(cache, "second", list(range(50, 62)) + [0])
    run_request(cache, "again", list(range(12)) + [1])  # first's blocks, released once more
    assert cache.evict(3) == 3
    assert all(pool.ref_counts[b] == 0 for b in second[:3])
    assert all(pool.ref_counts[b] == 1 for b in first[:3])
    assert cache.evict(pool.num_blocks) == 3  # only first's blocks were left to evict
    assert all(pool.ref_counts[b] == 0 for b in first[:3])


def test_releasing_one_prefix_over_and_over_keeps_the_eviction_queue_within_twice_the_pool():
    pool = BlockPool(16, BS)
    cache = PrefixCache(pool)
    _, early = run_request(cache, "early", list(range(50, 62)) + [0])
    prefix = list(range(12))
    for turn in range(100):
        run_request(cache, f"t{turn}", prefix + [turn % 7])
    assert cache.index._queued <= 2 * pool.num_blocks
    assert cache.evict(3) == 3  # "early" was released before every turn: it goes first
    assert all(pool.ref_counts[b] == 0 for b in early[:3])
    assert cache.evict(pool.num_blocks) == 3  # the prefix's blocks, each queued once however often released
    assert pool.num_free == pool.num_blocks
