"""TokenizerSession in front of a server that receives whole conversations: each call
re-tokenizes only what the resent prompt changed, and returns exactly Tokenizer.encode's ids."""
from zllm_core import Tokenizer, TokenizerSession

tokenizer = Tokenizer.from_family("qwen2")
session = TokenizerSession(tokenizer)

conversation = "<|im_start|>system\nYou are a coding agent.<|im_end|>\n"
for turn in range(3):
    conversation += f"<|im_start|>user\nStep {turn}: run the tests.<|im_end|>\n<|im_start|>assistant\n"
    ids = session.encode(conversation, session_id="agent-42")
    assert ids == tokenizer.encode(conversation, allowed_special="all")
    print(f"turn {turn}: {len(ids)} tokens")
    conversation += "All tests pass.<|im_end|>\n"

print({k: session.metrics()[k] for k in ("calls", "cold", "repairs")})
