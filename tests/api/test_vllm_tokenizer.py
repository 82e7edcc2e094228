"""TokenizerSession alone, as a vLLM-style server would call it: a 20-turn agent conversation
resent in full on every call, each call's ids equal to tiktoken's over the whole prompt."""
from __future__ import annotations

from tests.tokenizer.references import tiktoken_encoding
from zllm_core.adapters.vllm_tokenizer import TokenizerSession
from zllm_core.tokenizer import Tokenizer

TURNS = 20


def chatml(messages: list[tuple[str, str]], generation_prompt: bool) -> str:
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)
    return text + ("<|im_start|>assistant\n" if generation_prompt else "")


def turn(k: int) -> tuple[str, str]:
    """A user request and an answer that touch what re-tokenization is fragile on: code,
    whitespace runs, digits, contractions, non-Latin scripts and an emoji."""
    user = f"Step {k}: fix `parse_{k}()` in src/m{k}.py — it doesn't handle 'ü' or 日本語 ({k * 37}%)."
    answer = (f"Done.\n```python\ndef parse_{k}(s):\n    return [int(x)  for x in s.split()]  # {k}\n```\n"
              f"   Tests pass 🎉{' ' * (k % 4)}")
    return user, answer


def test_every_call_of_a_resent_conversation_matches_the_reference():
    session = TokenizerSession(Tokenizer.from_family("qwen2"), shadow_rate=0.0)
    reference = tiktoken_encoding("qwen2")
    messages = [("system", "You are a coding agent.")]
    for k in range(TURNS):
        user, answer = turn(k)
        messages.append(("user", user))
        prompt = chatml(messages, generation_prompt=True)
        assert session.encode(prompt, session_id="agent-1") == reference.encode(prompt, allowed_special="all"), k
        messages.append(("assistant", answer))
    counted = session.metrics()
    assert counted["calls"] == TURNS and counted["cold"] == 1, "every later call continued the session"
    assert counted["repairs"] == TURNS - 1
