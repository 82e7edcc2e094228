"""The router between the CPU tokenizer and the GPU full path (device_route.py), with the device's
kernels emulated on this CPU (tests/kernels/gpu_tokenize_emulated.py), and on CUDA where a device
is present: which texts go where, an incremental session adopting a device result for an append
too large to repair cheaply, and the shadow verifier over device results."""
from __future__ import annotations

import numpy as np
import pytest

from tests.tokenizer.conftest import report
from tests.tokenizer.test_gpu_tokenizer import backend, emulated_library  # noqa: F401  (fixtures)
from zllm_core.tokenizer import Tokenizer
from zllm_core.tokenizer.device_route import REPAIR_LIMIT_CHARS, Calibration, DeviceRoute
from zllm_core.tokenizer.gpu_tokenizer import GpuTokenizer, cuda_available
from zllm_core.tokenizer.incremental import IncrementalTokenizer


@pytest.fixture(scope="module")
def code(documents) -> str:
    return "".join(documents["stdlib"])[:1_200_000]


def routed_tokenizer(backend, **route) -> tuple[Tokenizer, DeviceRoute]:
    """A fresh cl100k tokenizer (routes are per object) with a device route over `backend`."""
    tok = Tokenizer.from_family("cl100k_base")
    r = DeviceRoute(tok, GpuTokenizer(tok, backend), **{"shadow_rate": 0.0, **route})
    tok.attach_device(r)
    return tok, r


@pytest.mark.skipif(cuda_available(), reason="a CUDA device is present")
def test_cpu_only_hosts_attach_no_device(code):
    tok = Tokenizer.from_family("cl100k_base")
    assert tok.encode(code[:50_000]) == tok.cpu_encode(code[:50_000], tok.special_policy(frozenset()))
    assert tok.device is None and tok.device_route(10**6) is None


def test_texts_go_to_the_device_by_size(backend, code):
    tok, route = routed_tokenizer(backend, min_chars=20_000)
    small, big = code[:10_000], code[:60_000]
    policy = tok.special_policy(frozenset())
    assert tok.encode(small) == tok.cpu_encode(small, policy) and route.stats.texts == 0
    assert tok.encode(big) == tok.cpu_encode(big, policy) and route.stats.texts == 1
    assert tok.encode_to_numpy(big).tolist() == tok.cpu_encode(big, policy) and route.stats.texts == 2
    assert tok.count(big) == len(tok.cpu_encode(big, policy)) and route.stats.texts == 3
    assert tok.encode_batch([big, small]) == [tok.cpu_encode(t, policy) for t in (big, small)]
    assert route.stats.texts == 4


def test_crossover_and_append_decision_from_calibration():
    c = Calibration(cpu_ns_per_char=10.0, device_fixed_ns=50_000.0, device_ns_per_char=0.5)
    assert c.crossover_chars == 5264  # 50 us / 9.5 ns a character, rounded up
    assert Calibration(1.0, 10.0, 2.0).crossover_chars is None  # a device slower per character never wins
    tok = Tokenizer.from_family("r50k_base")
    route = DeviceRoute(tok, gpu=None, calibration=c)
    assert route.min_chars == 5264 and route.wants(10_000) and not route.wants(5000)
    assert route.prefers_full(1_100_000, 100_000, 512)      # 0.6 ms on the device, 1 ms repairing
    assert not route.prefers_full(10_000_000, 100_000, 512)  # 5 ms on the device
    assert not route.prefers_full(1_100_000, REPAIR_LIMIT_CHARS, 512)  # small enough to repair


def test_large_append_goes_to_the_full_path_and_the_session_adopts_it(backend, code, capsys):
    """100K characters appended to a 1M-character session: the router sends the whole text to the
    device, the session takes its tokens, and continues from them."""
    tok, route = routed_tokenizer(backend, min_chars=2_000_000)  # the cold 1M stays on the CPU
    inc = IncrementalTokenizer(tok, shadow_rate=0.0)
    policy = tok.special_policy("all")
    base, grown = code[:1_000_000], code[:1_100_000]
    inc.encode(base)
    assert inc.stats.cold == 1 and route.stats.texts == 0
    ids = inc.encode(grown)
    assert inc.stats.routed_full == 1 and route.stats.texts == 1
    assert ids.tolist() == tok.cpu_encode(grown, policy)
    tail = grown + "\n# one more line\n"
    assert inc.encode(tail).tolist() == tok.cpu_encode(tail, policy)
    assert inc.stats.repairs == 1 and inc.stats.routed_full == 1  # a small append is repaired
    report(capsys, f"1,000,000 + 100,000 chars: routed to the device path, {len(ids):,} tokens exact")


def test_cold_sessions_take_the_device_path(backend, code):
    tok, route = routed_tokenizer(backend, min_chars=20_000)
    inc = IncrementalTokenizer(tok, shadow_rate=0.0)
    ids = inc.encode(code[:80_000])
    assert route.stats.texts == 1 and ids.tolist() == tok.cpu_encode(code[:80_000], tok.special_policy("all"))
    assert inc.encode(code[:80_500]).tolist() == tok.cpu_encode(code[:80_500], tok.special_policy("all"))


class Corrupting:
    """A device that gets one id wrong (a scripted fault below the layer under test)."""

    def __init__(self, inner):
        self.inner = inner

    def run(self, *args, **kwargs):
        out = self.inner.run(*args, **kwargs)
        if "ids" in out:
            out["ids"] = out["ids"].copy()
            out["ids"][5] += 1
        return out


def test_shadow_turns_a_wrong_device_off(backend, code):
    tok, route = routed_tokenizer(lambda t: Corrupting(backend(t)), min_chars=20_000, shadow_rate=1.0)
    text = code[:40_000]
    tok.encode(text)
    route.shadow.drain()
    assert route.shadow.stats.mismatches == 1 and not route.enabled
    assert tok.encode(text) == tok.cpu_encode(text, tok.special_policy(frozenset()))
    assert route.stats.texts == 1  # the second call never reached the device


class Voiding:
    def __init__(self, inner):
        self.inner = inner

    def run(self, *args, **kwargs):
        return {**self.inner.run(*args, **kwargs), "flags": 1}


def test_a_voided_run_falls_back_to_the_cpu(backend, code):
    tok, route = routed_tokenizer(lambda t: Voiding(backend(t)), min_chars=20_000)
    text = code[:30_000]
    assert tok.encode(text) == tok.cpu_encode(text, tok.special_policy(frozenset()))
    assert route.stats.fallbacks == 1 and route.gpu.void_runs == 1 and np.isscalar(route.min_chars)


class Failing:
    def __init__(self, tables):
        pass

    def run(self, *args, **kwargs):
        raise RuntimeError("GPU tokenizer: cudaGraphLaunch: out of memory")


def test_a_device_error_turns_the_route_off(code):
    tok, route = routed_tokenizer(Failing, min_chars=20_000)
    text = code[:30_000]
    assert tok.encode(text) == tok.cpu_encode(text, tok.special_policy(frozenset()))
    assert not route.enabled and tok.device_route(30_000) is None


def test_a_batch_over_the_device_capacity_takes_the_cpu_path(backend, code, monkeypatch):
    tok, route = routed_tokenizer(backend, min_chars=20_000)
    monkeypatch.setattr("zllm_core.tokenizer.gpu_tokenizer.MAX_BATCH_BYTES", 25_000)
    text = code[:30_000]
    assert tok.encode(text) == tok.cpu_encode(text, tok.special_policy(frozenset()))
    assert route.stats.fallbacks == 1 and route.enabled
