"""GPU timing shared by the kernel benchmarks: CUDA events around back-to-back launches."""
from __future__ import annotations

from typing import Callable

import torch


def cuda_seconds(fn: Callable[[], object], reps: int) -> float:
    """Mean seconds per call of `fn` over `reps` launches, timed on the device's own clock."""
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3 / reps
