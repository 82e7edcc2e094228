"""The SSD tier behind a real pool and prefix cache: backup on eviction, restore on a miss,
untrusted blobs refused before allocation, and every block returned whatever happens."""
import random
import struct

import numpy as np
import pytest
import torch
import xxhash

from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.kv_storage import KVLayout, KVStorage
from zllm_core.cache.prefix_cache import CacheRequest, PrefixCache
from zllm_core.cache.scope import Scope
from zllm_core.cache.snapshot_format import _FIXED
from zllm_core.cache.ssd_tier import SSDConfig, SSDTier

BS = 4
LAYOUT = KVLayout(num_layers=2, num_kv_heads=1, head_dim=4, dtype=torch.float32, block_size=BS)
SCOPE = Scope("model-a").digest()
OTHER = Scope("model-a", tenant="other").digest()


def make_cache(path, num_blocks=16, budget=1 << 30, write_through=False):
    pool = BlockPool(num_blocks, BS)
    config = SSDConfig(str(path), budget, write_through=write_through)
    return PrefixCache(pool, ssd=SSDTier(KVStorage(LAYOUT, num_blocks), config))


def fill(storage, table, tokens):
    """Stand-in for the model: K/V of position p is a function of the tokens up to p."""
    prefix = np.cumsum(np.asarray(tokens, dtype=np.float64) % 9973) % 1e6
    for p in range(len(tokens)):
        block, slot = table[p // BS], p % BS
        for layer, (k, v) in enumerate(storage.kv_caches):
            k[block, slot] = float(prefix[p]) + layer
            v[block, slot] = -float(prefix[p]) - layer


def run_request(cache, rid, tokens, scope=SCOPE, cache_id=None):
    """What the scheduler and engine do for a request whose prompt is prefilled in one step;
    the restored K/V must equal what the stand-in model computes."""
    pool, storage = cache.pool, cache.ssd.storage
    hit = cache.match(rid, tokens, CacheRequest(scope, cache_id))
    expected = KVStorage(LAYOUT, len(hit.blocks) + 1)
    fill(expected, list(range(len(hit.blocks) + 1)), tokens[:hit.num_tokens])
    restored = storage.gather(hit.blocks)
    assert torch.equal(restored, expected.gather(range(len(hit.blocks)))), "wrong K/V restored"
    table = hit.blocks.tolist() + pool.allocate(-(-len(tokens) // BS) - len(hit.blocks))
    fill(storage, table, tokens)
    cache.commit(rid, tokens, table, len(tokens))
    pool.free(table)
    cache.release(rid, table, tokens)
    return hit


def push_to_disk(cache):
    cache.evict(cache.pool.num_blocks)
    cache.ssd.writer.flush()


def tokens(n, seed):
    rng = random.Random(seed)
    return [rng.randrange(1000, 150000) for _ in range(n)]


def test_an_evicted_prefix_is_restored_from_disk(tmp_path):
    cache = make_cache(tmp_path)
    prompt = tokens(30, 1)
    run_request(cache, "a", prompt)
    push_to_disk(cache)
    hit = run_request(cache, "b", prompt[:25] + [7, 7])
    assert hit.kind == "ssd_longest_prefix" and hit.num_tokens == 24
    assert cache.ssd.stats.hits == 1 and cache.ssd.stats.restored_tokens == 24


def test_a_restart_restores_by_exact_cache_id(tmp_path):
    cache = make_cache(tmp_path)
    prompt = tokens(30, 2)
    run_request(cache, "a", prompt, cache_id="conv")
    cache.close()
    again = make_cache(tmp_path)
    hit = run_request(again, "b", prompt + [5, 5, 5], cache_id="conv")
    assert hit.kind == "ssd_exact_id" and hit.num_tokens == 28


def test_an_exact_cache_id_is_a_hint_verified_by_tokens(tmp_path):
    cache = make_cache(tmp_path)
    run_request(cache, "a", tokens(30, 3), cache_id="conv")
    cache.close()
    hit = run_request(make_cache(tmp_path), "b", tokens(30, 4), cache_id="conv")
    assert hit.kind == "cold"


def test_another_scope_never_restores(tmp_path):
    cache = make_cache(tmp_path)
    prompt = tokens(30, 5)
    run_request(cache, "a", prompt)
    push_to_disk(cache)
    assert run_request(cache, "b", prompt, scope=OTHER).kind == "cold"


def test_blocks_already_on_disk_are_not_written_twice(tmp_path):
    cache = make_cache(tmp_path)
    prompt = tokens(30, 6)
    run_request(cache, "a", prompt)
    push_to_disk(cache)
    written = cache.ssd.writer.stats.bytes_written
    run_request(cache, "b", prompt)
    push_to_disk(cache)
    assert cache.ssd.writer.stats.bytes_written == written


def test_write_through_lets_another_engine_restore_a_conversation_still_resident(tmp_path):
    """Two engines share a directory (cluster replicas): the one a conversation moves to
    restores it while the first still holds it (nothing evicted, nothing closed)."""
    first, second = make_cache(tmp_path, write_through=True), make_cache(tmp_path, write_through=True)
    prompt = tokens(30, 7)
    run_request(first, "a", prompt, cache_id="conv")
    first.ssd.writer.flush()
    assert first.evict(0) == 0 and len(first.index) == 7  # still resident there
    hit = run_request(second, "b", prompt + [5, 5, 5], cache_id="conv")
    assert hit.kind == "ssd_exact_id" and hit.num_tokens == 28
    without = make_cache(tmp_path / "plain")
    run_request(without, "a", prompt, cache_id="conv")
    without.ssd.writer.flush()
    assert without.ssd.writer.stats.blobs == 0  # the default backs up at eviction only


# -- untrusted blobs ------------------------------------------------------------------


def rewrite_fixed(path, **fields):
    """Change header fields and re-sign the header: a well-formed blob that says something else."""
    raw = bytearray(path.read_bytes())
    names = ["magic", "version", "dtype", "layers", "heads", "dim", "bs", "gen", "count", "key_len", "scope"]
    values = dict(zip(names, _FIXED.unpack_from(raw)))
    values.update(fields)
    raw[:_FIXED.size] = _FIXED.pack(*values.values())
    rest_start = _FIXED.size + 8
    rest = raw[rest_start:rest_start + values["count"] * (values["key_len"] + 8)]
    raw[_FIXED.size:rest_start] = struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(raw[:_FIXED.size]) + rest))
    path.write_bytes(raw)


def flip_data_bit(path):
    raw = bytearray(path.read_bytes())
    raw[-LAYOUT.bytes_per_block - 3] ^= 0x10
    path.write_bytes(raw)


def flip_key_bit(path):
    raw = bytearray(path.read_bytes())
    raw[_FIXED.size + 8 + 5] ^= 0x01
    path.write_bytes(raw)


def truncate(path):
    path.write_bytes(path.read_bytes()[:-100])


def swap_chunks(path):
    raw = bytearray(path.read_bytes())
    b = LAYOUT.bytes_per_block
    first, second = raw[-2 * b:-b], raw[-b:]
    raw[-2 * b:] = second + first
    path.write_bytes(raw)


CORRUPTIONS = {
    "bit flip in data": flip_data_bit,
    "bit flip in a key": flip_key_bit,
    "truncation": truncate,
    "swapped chunk": swap_chunks,
    "wrong version": lambda p: rewrite_fixed(p, version=2),
    "foreign scope": lambda p: rewrite_fixed(p, scope=OTHER),
    "other dtype": lambda p: rewrite_fixed(p, dtype=2),
    "implausible count": lambda p: rewrite_fixed(p, count=1 << 30),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_bad_blob_is_refused_before_allocation_quarantined_and_served_as_a_miss(tmp_path, corrupt):
    cache = make_cache(tmp_path)
    prompt = tokens(30, 7)
    run_request(cache, "a", prompt)
    push_to_disk(cache)
    (blob,) = (tmp_path / "blobs").iterdir()
    corrupt(blob)
    free_before = list(cache.pool._free)
    hit = cache.match("b", prompt, CacheRequest(SCOPE))
    assert hit.kind == "cold" and not len(hit.blocks)
    assert list(cache.pool._free) == free_before  # not one block was taken
    assert cache.ssd.stats.quarantined == 1 and cache.ssd.stats.hits == 0
    assert (tmp_path / "quarantine" / blob.name).exists() and not blob.exists()
    cache.release("b", [])
    assert run_request(cache, "c", prompt).kind == "cold"  # the blob is out of the index


def test_a_restore_failing_in_a_later_stage_returns_every_block(tmp_path, monkeypatch):
    from zllm_core.cache import snapshot_reader
    monkeypatch.setattr(snapshot_reader, "STAGE_BYTES", 2 * LAYOUT.bytes_per_block)
    cache = make_cache(tmp_path, num_blocks=32)
    prompt = tokens(60, 8)
    run_request(cache, "a", prompt)
    push_to_disk(cache)
    (blob,) = (tmp_path / "blobs").iterdir()
    flip_data_bit(blob)  # the last block: stages before it are already in the pool
    hit = cache.match("b", prompt, CacheRequest(SCOPE))
    assert hit.kind == "cold" and cache.ssd.stats.quarantined == 1
    cache.release("b", [])
    assert cache.pool.num_free == cache.pool.num_blocks


def test_a_thousand_requests_with_cancels_and_failed_restores_leave_the_pool_empty(tmp_path):
    """Conversations that outgrow a small pool, every blob on disk corrupted ten times as they
    go, and some requests cancelled after their match: restored K/V is always exact, and once the
    index is cleared every block is free."""
    rng = random.Random(9)
    cache = make_cache(tmp_path, num_blocks=24)
    pool = cache.pool
    convs = [tokens(rng.randrange(8, 40), 100 + i) for i in range(12)]
    for i in range(1000):
        c = rng.randrange(len(convs))
        prompt = convs[c] + tokens(rng.randrange(1, 6), 10_000 + i)
        if len(prompt) > 60:
            convs[c] = prompt = tokens(10, 20_000 + i)
        if rng.random() < 0.15:  # cancelled after the cache adopted (or restored) its prefix
            hit = cache.match(f"r{i}", prompt, CacheRequest(SCOPE))
            pool.free(hit.blocks)
            cache.release(f"r{i}", hit.blocks)
        else:
            if pool.num_free < 16:
                cache.evict(16 - pool.num_free)
            run_request(cache, f"r{i}", prompt, cache_id=f"conv{c}")
            convs[c] = prompt
        if i % 97 == 96:  # every blob on disk goes bad: the next restores fail
            cache.ssd.writer.flush()
            for blob in (tmp_path / "blobs").iterdir():
                flip_data_bit(blob)
    # How many restores hit depends on how far the asynchronous writer got before each request
    # (485 to 834 seen): the property is that many did, each exact, and the bad ones were caught.
    assert cache.ssd.stats.hits > 200 and cache.ssd.stats.quarantined >= 10
    cache.clear()
    assert pool.is_empty()
    cache.close()
