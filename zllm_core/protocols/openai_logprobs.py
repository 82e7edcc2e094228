"""Logprobs as both OpenAI APIs spell them (Chat's `logprobs.content`, Responses' output_text
`logprobs`): the token as text, its exact bytes, and the top alternatives."""
from __future__ import annotations

from typing import Any, Iterable

from zllm_core.protocols.canonical import LogprobEntry


def _token(token: bytes, logprob: float) -> dict[str, Any]:
    # A token may end inside a UTF-8 character: the text shows U+FFFD, the bytes stay exact.
    return {"token": token.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(token)}


def wire_logprobs(entries: Iterable[LogprobEntry]) -> list[dict[str, Any]]:
    return [{**_token(e.token, e.logprob), "top_logprobs": [_token(t, lp) for t, lp in e.top]}
            for e in entries]
