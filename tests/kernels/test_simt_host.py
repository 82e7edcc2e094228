"""simt_host.h's warp operations, atomics and barriers against CUDA's semantics, and its reports
of what a GPU would leave undefined (a lane skipping a warp operation, a barrier some thread
never reaches)."""
import ctypes

import numpy as np
import pytest

from simt_build import host_library

THREADS = 64


@pytest.fixture(scope="module")
def simt(tmp_path_factory):
    return host_library(tmp_path_factory, "simt_ops_host.cpp")


def test_warp_operations_match_cuda(simt):
    out = np.full((10, THREADS), -1, np.int32)
    counter = ctypes.c_uint(0)
    assert simt.simt_warp_ops(out.ctypes.data_as(ctypes.c_void_p), ctypes.byref(counter)) == 0
    lane = np.arange(THREADS) % 32
    v = lane * 3 + np.arange(THREADS) // 32 * 1000
    warp = np.arange(THREADS) // 32 * 32
    assert out[0].tolist() == np.where(lane >= 1, v - 3, v).tolist()        # up by 1: lane 0 keeps its own
    assert out[1].tolist() == np.where(lane < 30, v + 6, v).tolist()        # down by 2: the last two keep theirs
    assert out[2].tolist() == v[warp + (lane ^ 5)].tolist()
    assert out[3].tolist() == v[warp + 7].tolist()
    assert set(out[4].view(np.uint32).tolist()) == {sum(1 << k for k in range(0, 32, 3))}
    assert set(out[5].tolist()) == {69} and set(out[6].tolist()) == {496}
    assert set(out[7].tolist()) == {3}
    assert set(out[8].tolist()) == {sum(range(THREADS))}                   # warp 0 summed while warp 1 waited
    assert sorted(out[9].tolist()) == list(range(THREADS, 2 * THREADS))     # the second block's 64 adds
    assert counter.value == 2 * THREADS


def test_undefined_behaviour_is_reported(simt):
    out = np.zeros(THREADS, np.int32)
    assert simt.simt_divergent(out.ctypes.data_as(ctypes.c_void_p)) == 2
    assert simt.simt_early_exit(out.ctypes.data_as(ctypes.c_void_p)) == 2
