import pytest

from zllm_core.cache.scope import Scope
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.model.loader import load_model
from zllm_core.model.model_names import resolve_model


@pytest.fixture(scope="session")
def demo_model():
    return load_model(resolve_model("zllm-demo"))


@pytest.fixture
def make_engine(demo_model):
    """An engine over the real demo model; token ids in, token ids out (no tokenizer needed)."""
    def make(**config) -> LLMEngine:
        config.setdefault("kv_cache_bytes", 32 << 20)
        return LLMEngine(demo_model, None, EngineConfig(**config), Scope("demo-test"))
    return make
