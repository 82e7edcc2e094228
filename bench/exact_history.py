"""Token-exact history on agent traces: the prefix-cache hit of every call against its ceiling,
with the previous answer kept as the ids the model generated, and, in the same run, the peer
that re-tokenizes it (what vLLM and SGLang do).

Each call of the trace's sessions goes through the real ASGI app (OpenAI Chat, the trace's
tools and history) over the engine's real bookkeeping with the model not run
(bookkeeping_engine.py). The bookkeeping engine "generates" what the session's next call
resends as this call's assistant turn, in the pieces a sampling model may write it in (the
text encoded 3 characters at a time: non-canonical wherever BPE would merge across them),
then the end of turn; so the next call's history holds the generated text verbatim, as
Claude Code resends its own answers. The peer records no generations: every turn is
tokenized from its text.

Ceiling of a call: the previous prompt + its generated tokens, less the last (never run
through the model), rounded down to the block, when the rendered prompt continues the
previous one; else (a compaction) the blocks of the tokens it shares with that.

    PYTHONPATH=$PWD python bench/exact_history.py [--sessions 4] [--max-calls 60]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asgi_call import post_json  # noqa: E402  (bench/ is on sys.path when run as a script)
from bookkeeping_engine import BookkeepingEngine, bench_engine  # noqa: E402
from trace_replay import agent_trace, trace_requests  # noqa: E402

from zllm_core.cache.token_ids import common_prefix  # noqa: E402
from zllm_core.dialects.conversation import Message  # noqa: E402
from zllm_core.model.model_names import resolve_model  # noqa: E402
from zllm_core.protocols import openai_chat  # noqa: E402
from zllm_core.server.app import create_app  # noqa: E402
from zllm_core.server.prompt import PromptBuilder  # noqa: E402
from zllm_core.server.runtime import ServerConfig  # noqa: E402
from zllm_core.tokenizer import Tokenizer  # noqa: E402

BLOCK = 16
END = "<|im_end|>"
SPECIAL = re.compile(r"(</?think>|</?tool_call>)")
BANDS = ((0, 100_000, "under 100K"), (100_000, 1_000_000, "100K-1M"), (1_000_000, 1 << 62, "over 1M"))


def wire(m: Message) -> dict:
    out = {"role": m.role, "content": m.content}
    if m.reasoning:
        out["reasoning_content"] = m.reasoning
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in m.tool_calls]
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    return out


def bodies(sessions: int, max_calls: int) -> list[tuple[int, bytes]]:
    out = []
    for s, system, tools, history in trace_requests(agent_trace(), sessions, max_calls):
        body = {"model": "zllm-demo", "max_tokens": 64, "tools": [{"type": "function", "function": t.openai_dict()
                                                                    ["function"]} for t in tools],
                "messages": [{"role": "system", "content": system}, *map(wire, history)]}
        out.append((s, json.dumps(body).encode()))
    return out


def pieces(tokenizer: Tokenizer, text: str, width: int = 3) -> list[int]:
    """`text` as a model may sample it: special tokens (<think>, <tool_call>) as themselves, the
    rest `width` characters a piece."""
    out = []
    for part in SPECIAL.split(text):
        if part in tokenizer.special_tokens:
            out += tokenizer.encode(part, allowed_special="all")
        else:
            out += [i for at in range(0, len(part), width) for i in tokenizer.encode(part[at:at + width])]
    return out


def replay(calls: list[tuple[int, bytes]], texts: list[str], record: bool) -> list[dict]:
    model_dir = resolve_model("zllm-demo")
    tok = Tokenizer.from_pretrained(model_dir)
    end = tok.encode(END, allowed_special="all")
    engine = BookkeepingEngine(bench_engine(600_000), end, tok.decode)
    prompts = PromptBuilder.from_model_dir(model_dir, tok)
    if not record:
        prompts.record = lambda prompt, generated, scope="": None  # the peer: the history re-tokenized
    app = create_app(engine, prompts, ServerConfig(model_name="zllm-demo", max_body_bytes=1 << 30,
                                                   max_output_tokens=1 << 20))
    rows, previous = [], None
    for k, (session, body) in enumerate(calls):
        nxt = texts[k + 1] if k + 1 < len(calls) and calls[k + 1][0] == session else ""
        said = nxt[len(texts[k]):].split(END)[0] if nxt.startswith(texts[k]) else "Done."
        engine.answer = pieces(tok, said) + end
        status, reply = asyncio.run(post_json(app, "/v1/chat/completions", body))
        assert status == 200, reply[:300]
        usage = json.loads(reply)["usage"]
        prompt = engine.prompt
        first = previous is None or previous[0] != session
        rows.append({"chars": len(texts[k]), "prompt": usage["prompt_tokens"], "first": first,
                     "cached": usage["prompt_tokens_details"]["cached_tokens"],
                     "ceiling": 0 if first else ceiling(texts[k - 1], *previous[1:], texts[k], prompt)})
        previous = (session, said, prompt, np.array(engine.answer, prompt.dtype))
    return rows


def ceiling(before: str, said: str, asked: np.ndarray, answer: np.ndarray, text: str, prompt: np.ndarray) -> int:
    """Cacheable tokens of `prompt` (rendered `text`) after the previous call (rendered `before`,
    prompted with `asked`, answered `said` in `answer`): its prompt and answer but the answer's
    last token when `text` resends the answer verbatim; else its prompt, when `text` continues
    that; else (a compaction) the ids the two prompts share."""
    if text.startswith(before + said + END):
        shared = len(asked) + len(answer) - 1
    elif text.startswith(before):
        shared = len(asked)
    else:
        shared = common_prefix(asked, prompt)
    return shared // BLOCK * BLOCK


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--max-calls", type=int, default=60)
    args = ap.parse_args()
    calls = bodies(args.sessions, args.max_calls)
    builder = PromptBuilder.from_model_dir(resolve_model("zllm-demo"), Tokenizer.from_pretrained(resolve_model("zllm-demo")))
    texts = [builder.render(openai_chat.to_canonical(openai_chat.ChatRequest.model_validate_json(b))) for _, b in calls]
    exact, peer = replay(calls, texts, True), replay(calls, texts, False)
    print(f"{len(calls)} calls of {args.sessions} sessions (first calls of a session excluded below)")
    print(f"{'context':<11} {'calls':>6} {'ceiling':>8} {'exact ids':>10} {'re-tokenized':>13} {'exact/ceiling':>14} "
          f"{'at ceiling':>11} {'peer at ceiling':>16}")
    for lo, hi, label in BANDS:
        idx = [i for i, r in enumerate(exact) if lo <= r["chars"] < hi and not r["first"]]
        if not idx:
            continue
        prompt = sum(exact[i]["prompt"] for i in idx)
        ceiling = sum(exact[i]["ceiling"] for i in idx) / prompt
        ours = sum(exact[i]["cached"] for i in idx) / prompt
        theirs = sum(peer[i]["cached"] for i in idx) / sum(peer[i]["prompt"] for i in idx)
        at = sum(exact[i]["cached"] >= exact[i]["ceiling"] for i in idx) / len(idx)
        peer_at = sum(peer[i]["cached"] >= exact[i]["ceiling"] for i in idx) / len(idx)
        print(f"{label:<11} {len(idx):>6} {ceiling:>8.4f} {ours:>10.4f} {theirs:>13.4f} {ours / ceiling:>13.4f}x "
              f"{at:>10.1%} {peer_at:>15.1%}")


if __name__ == "__main__":
    main()
