"""Tiny random checkpoints on disk, shared by the model tests."""
from __future__ import annotations

from pathlib import Path

import pytest
import transformers
from tiny_models import SHARDED, VARIANTS, build_reference


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict[str, tuple[Path, transformers.PreTrainedModel]]:
    """Per architecture: a saved checkpoint directory and the transformers model it came from."""
    out = {}
    for arch in VARIANTS:
        model = build_reference(arch)
        path = tmp_path_factory.mktemp(arch)
        model.save_pretrained(path, max_shard_size="40KB" if arch in SHARDED else "1GB")
        out[arch] = (path, model)
    return out
