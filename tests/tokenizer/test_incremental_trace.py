"""Replaying agent sessions rendered through the demo model's chat template: every call's
incremental tokens equal full tokenization, and the first 512-char window almost always
holds a proven boundary. (bench/tokenize_incremental.py replays the whole trace.)"""
from __future__ import annotations

from tests.tokenizer.conftest import report
from zllm_core.dialects.chat_template import ChatTemplate
from zllm_core.model.model_names import resolve_model
from zllm_core.tokenizer import Tokenizer
from zllm_core.tokenizer.incremental import IncrementalTokenizer
from trace_replay import rendered_calls  # bench/, on sys.path from tests/conftest.py


def test_trace_replay_is_exact_at_every_call(agent_trace, capsys):
    model_dir = resolve_model("zllm-demo")
    tok = Tokenizer.from_pretrained(model_dir)
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    calls = 0
    for s, text in rendered_calls(agent_trace,
                                  ChatTemplate.from_model_dir(model_dir), sessions=6, max_calls=80):
        assert inc.encode(text, "demo", key=f"session{s}").tolist() == tok.encode(text, allowed_special="all")
        calls += 1
    st = inc.stats
    report(capsys, f"{calls} calls: {st.repairs} repairs, first-window acceptance {st.first_window_rate:.3%}, "
                   f"{st.fallbacks} fallbacks, {st.cold} cold")
    assert st.disagreements == 0 and st.repairs > calls * 0.8 and st.first_window_rate > 0.98
