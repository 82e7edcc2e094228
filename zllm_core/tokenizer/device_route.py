"""The router between the CPU tokenizer and the GPU full path.

`Tokenizer.encode` (and encode_to_numpy, count, encode_batch) sends a text to the device when
it has at least `min_chars` characters; the incremental tokenizer sends a cold text there by the
same rule, and an append too large for a cheap repair (over REPAIR_LIMIT_CHARS, TokTier's open
item) to a full tokenization on the device when the calibration says that is faster, then
adopts the result as the session's tokens.

A route exists only where a CUDA device is present and the tokenizer is one the device path
reproduces exactly (gpu_tokenizer.device_support); it is built, and calibrated, on the first
text large enough to ask. On CPU-only hosts nothing changes: no route is ever built.
`min_chars` defaults to the calibrated crossover: the CPU's cost per character against the
device's fixed cost plus its cost per character, measured on the package's own sources.

A shadow verifier re-tokenizes a sample of the device's results on the CPU; a difference turns
the route off for good (every later text takes the CPU path) and is logged.
"""
from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zllm_core import _native
from zllm_core.tokenizer.gpu_tokenizer import DeviceUnsupported, GpuTokenizer, cuda_available
from zllm_core.tokenizer.shadow import Mismatch, ShadowVerifier
from zllm_core.tokenizer.tokenizer import DEVICE_FLOOR_CHARS, Tokenizer

log = logging.getLogger(__name__)

REPAIR_LIMIT_CHARS = 30_000  # appends longer than this are too large for a cheap repair
CALIBRATION_CHARS = (16_384, 131_072, 1_048_576)


@dataclass(frozen=True)
class Calibration:
    """Costs per call, linear in characters: the CPU path, and the device's."""

    cpu_ns_per_char: float
    device_fixed_ns: float
    device_ns_per_char: float

    def cpu_ns(self, chars: int) -> float:
        return self.cpu_ns_per_char * chars

    def device_ns(self, chars: int) -> float:
        return self.device_fixed_ns + self.device_ns_per_char * chars

    @property
    def crossover_chars(self) -> int | None:
        """The smallest text the device tokenizes faster, or None when it never does."""
        gain = self.cpu_ns_per_char - self.device_ns_per_char
        return int(self.device_fixed_ns / gain) + 1 if gain > 0 else None


def calibration_text(chars: int) -> str:
    """The package's own Python sources, repeated to `chars`: code, as agents' contexts are."""
    root = Path(__file__).resolve().parents[1]
    source = "\n".join(p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py")))
    return (source * (chars // len(source) + 1))[:chars]


def calibrate(tokenizer: Tokenizer, gpu: GpuTokenizer, rounds: int = 3) -> Calibration:
    """Median times of both paths at a few sizes, fitted to a line each (least squares)."""
    text = calibration_text(max(CALIBRATION_CHARS))
    policy = tokenizer.special_policy(frozenset())
    sizes, cpu, device = [], [], []
    for chars in CALIBRATION_CHARS:
        sample = text[:chars]
        gpu.encode(sample, policy)  # the capacity bucket's graph is built outside the timing
        sizes.append(chars)
        cpu.append(_median_ns(lambda: tokenizer.cpu_encode(sample, policy, as_array=True), rounds))
        device.append(_median_ns(lambda: gpu.encode(sample, policy), rounds))
    cpu_slope = float(np.dot(sizes, cpu) / np.dot(sizes, sizes))  # through the origin
    slope, fixed = np.polyfit(sizes, device, 1)
    return Calibration(cpu_slope, max(float(fixed), 0.0), max(float(slope), 0.0))


def _median_ns(call, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times)


@dataclass
class RouteStats:
    texts: int = 0      # tokenized on the device
    fallbacks: int = 0  # asked, but the CPU took them (a disallowed special, a voided run)


@dataclass
class DeviceRoute:
    """Which texts go to `gpu`, and the shadow check of what it returns."""

    tokenizer: Tokenizer
    gpu: GpuTokenizer
    calibration: Calibration | None = None
    min_chars: int | None = None  # None: the calibration's crossover
    shadow_rate: float = 0.02
    shadow_seed: int | None = None
    enabled: bool = True
    stats: RouteStats = field(default_factory=RouteStats)

    def __post_init__(self):
        if self.min_chars is None:
            crossover = self.calibration.crossover_chars if self.calibration else None
            self.min_chars = max(DEVICE_FLOOR_CHARS, crossover) if crossover is not None else None
        self.shadow = ShadowVerifier(self.tokenizer.cpu_encode, self._disable, self.tokenizer.decode,
                                     rate=self.shadow_rate, seed=self.shadow_seed, label="GPU tokenization")

    def wants(self, chars: int) -> bool:
        return self.enabled and self.min_chars is not None and chars >= self.min_chars

    def prefers_full(self, chars: int, appended: int, window: int) -> bool:
        """Whether a text of `chars` characters whose last `appended` changed is better tokenized
        whole on the device than repaired on the CPU (its cost grows with the append)."""
        if not self.enabled or appended <= REPAIR_LIMIT_CHARS:
            return False
        c = self.calibration
        return c is None or c.device_ns(chars) < c.cpu_ns(appended + window)

    def encode(self, text: str, policy: _native.SpecialPolicy) -> np.ndarray | None:
        return self._checked(text, policy, self._device(self.gpu.encode, text, policy))

    def encode_batch(self, texts: list[str], policy: _native.SpecialPolicy) -> list[np.ndarray] | None:
        out = self._device(self.gpu.encode_batch, texts, policy)
        if out is not None and texts:
            k = int(np.argmax([len(t) for t in texts]))  # one shadow sample a batch: its largest text
            self._checked(texts[k], policy, out[k])
        return out

    def encode_run(self, text: str, policy: _native.SpecialPolicy) -> _native.TokenRun | None:
        """A session's TokenRun of `text` from the device (None: the CPU must take it)."""
        run = self._device(self.gpu.encode_run, text, policy)
        self._checked(text, policy, None if run is None else run.ids)
        return run

    def _device(self, call, *args):
        """call(*args) on the device; a CUDA error (out of memory, a lost device) turns the route
        off, and the caller takes the CPU path."""
        try:
            return call(*args)
        except RuntimeError as e:
            self.enabled = False
            log.error("GPU tokenizer failed (%s); %s now stays on the CPU", e, self.tokenizer.name)
            return None

    def _checked(self, text: str, policy: _native.SpecialPolicy, ids: np.ndarray | None) -> np.ndarray | None:
        if ids is None:
            self.stats.fallbacks += 1
            return None
        self.stats.texts += 1
        self.shadow.sample(0, text, ids, reference=lambda t: self.tokenizer.cpu_encode(t, policy))
        return ids

    def _disable(self, mismatch: Mismatch) -> None:
        self.enabled = False
        log.error("GPU tokenizer differs from the CPU path (token %d); %s now stays on the CPU",
                  mismatch.token_index, self.tokenizer.name)


def attach(tokenizer: Tokenizer) -> DeviceRoute | None:
    """The device route of `tokenizer`, calibrated now; None without a CUDA device, or for a
    tokenizer the device path cannot reproduce exactly (logged with the reason)."""
    if not cuda_available():
        return None
    try:
        gpu = GpuTokenizer(tokenizer)
        return DeviceRoute(tokenizer, gpu, calibrate(tokenizer, gpu))
    except DeviceUnsupported as e:
        log.info("GPU tokenizer: %s stays on the CPU: %s", tokenizer.name, e)
    except RuntimeError as e:  # a CUDA error: out of memory, a driver problem
        log.warning("GPU tokenizer unavailable for %s: %s", tokenizer.name, e)
    return None
