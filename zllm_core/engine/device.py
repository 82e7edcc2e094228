"""Which torch device a model runs on: `auto`, or a name checked against this torch build."""
from __future__ import annotations

import torch


def resolve_device(name: str) -> str:
    """`auto` -> `cuda` when this torch sees a GPU, else `cpu`; an unusable name is refused in
    one line that says why, instead of torch's assertion deep inside the first CUDA call."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name!r} is not a torch device (try auto, cpu or cuda)") from None
    if device.type == "cuda":
        if torch.version.cuda is None:
            raise ValueError(f"--device {name}: this torch ({torch.__version__}) is a CPU-only build; "
                             "use --device cpu, or install a CUDA build of torch")
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name}: torch {torch.__version__} sees no CUDA device "
                             "(no driver, or CUDA_VISIBLE_DEVICES hides them); use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) visible")
    elif device.type != "cpu":
        raise ValueError(f"--device {name}: only cpu and cuda are supported")
    return name


def describe_device(name: str) -> str:
    """For the startup line: `cuda:0 (NVIDIA H200)` or `cpu (2 threads)`."""
    device = torch.device(name)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return f"cpu ({torch.get_num_threads()} threads)"
