import pytest
import torch

from zllm_core.cache.block_pool import BlockPool, OutOfBlocks
from zllm_core.cache.kv_storage import KVLayout, KVStorage

LAYOUT = KVLayout(num_layers=2, num_kv_heads=2, head_dim=8, dtype=torch.float32, block_size=16)


def test_capacity_comes_from_a_byte_budget_and_allocated_bytes_are_real():
    storage = KVStorage(LAYOUT, LAYOUT.blocks_in(10 * LAYOUT.bytes_per_block + 123))
    assert storage.num_blocks == 10
    assert storage.allocated_bytes == 10 * LAYOUT.bytes_per_block
    assert storage.kv_caches[0][0].shape == (10, 16, 2, 8)


def test_budget_too_small_for_one_block_is_refused():
    with pytest.raises(ValueError, match="holds no block"):
        LAYOUT.blocks_in(LAYOUT.bytes_per_block - 1)


def test_allocate_free_returns_exactly_to_empty():
    pool = BlockPool(8)
    a = pool.allocate(5)
    assert pool.num_free == 3 and pool.num_used == 5
    pool.free(a)
    assert pool.is_empty()


def test_over_allocation_raises_and_changes_nothing():
    pool = BlockPool(4)
    pool.allocate(3)
    with pytest.raises(OutOfBlocks):
        pool.allocate(2)
    assert pool.num_free == 1


def test_shared_block_is_freed_only_by_its_last_owner():
    pool = BlockPool(4)
    blocks = pool.allocate(2)
    pool.incref(blocks)
    pool.free(blocks)
    assert pool.num_free == 2
    pool.free(blocks)
    assert pool.is_empty()


def test_double_free_is_an_error():
    pool = BlockPool(2)
    b = pool.allocate(1)
    pool.free(b)
    with pytest.raises(ValueError, match="freed more often"):
        pool.free(b)


def test_sharing_a_free_block_is_an_error():
    pool = BlockPool(2)
    with pytest.raises(ValueError, match="is free"):
        pool.incref([1])


def test_a_block_repeated_in_one_call_is_refused_and_nothing_changes():
    pool = BlockPool(4)
    a, b = pool.allocate(2)
    with pytest.raises(ValueError, match="appears twice"):
        pool.free([a, b, a])
    assert pool.ref_counts[a] == 1 and pool.ref_counts[b] == 1 and pool.num_free == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gathered_blocks_scatter_back_bit_for_bit_in_every_dtype(dtype):
    layout = KVLayout(num_layers=2, num_kv_heads=2, head_dim=4, dtype=dtype, block_size=4)
    src, dst = KVStorage(layout, 10), KVStorage(layout, 10)
    for k, v in src.kv_caches:
        k.normal_()
        v.normal_()
    kv = src.gather([3, 1, 7])
    assert kv.shape == (3, 2, 2, 4, 2, 4) and torch.equal(kv[1, 1, 0], src.kv_caches[1][0][1])
    dst.scatter([0, 5, 2], kv)
    assert torch.equal(dst.gather([0, 5, 2]), kv) and torch.equal(dst.kv_caches[0][1][2], src.kv_caches[0][1][7])
