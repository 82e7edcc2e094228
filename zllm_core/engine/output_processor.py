"""Engine outputs (token ids) become stream events (text): one processor per request.

It runs wherever the request's consumer runs (the server's event loop, the offline
loop), not on the engine thread, and costs time linear in the output.  A stop string
ends the stream here; the caller then tells the engine to finish the request.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from zllm_core.engine.detokenizer import StreamDetokenizer
from zllm_core.engine.llm_engine import RequestOutput
from zllm_core.engine.sampler import TokenLogprob


@dataclass(frozen=True)
class GenerationEvent:
    token_ids: list[int]
    text: str  # newly released text
    finish_reason: Optional[str]  # "stop" | "length" | "abort" once finished
    stop_string: Optional[str]  # which stop string ended it, if one did
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    logprobs: Optional[list[TokenLogprob]] = None
    drafted: int = 0  # speculation so far: draft tokens verified, and accepted
    accepted: int = 0


class OutputProcessor:
    def __init__(self, decode_bytes: Optional[Callable[[Sequence[int]], bytes]], stop: Sequence[str] = ()):
        self._detok = StreamDetokenizer(decode_bytes, stop) if decode_bytes is not None else None

    def process(self, out: RequestOutput) -> GenerationEvent:
        """The event for one engine output; finished (``stop``) when a stop string appears even
        if the engine has not finished the request."""
        reason, text, stop_string = out.finish_reason, "", None
        detok = self._detok
        if detok is not None:
            ids = out.new_token_ids[:-1] if out.stop_token else out.new_token_ids  # a stop token has no text
            text = detok.push(ids) if ids else ""
            if detok.stopped:
                reason, stop_string = "stop", detok.stopped
            if reason:
                text += detok.flush()
        return GenerationEvent(out.new_token_ids, text, reason, stop_string, out.prompt_tokens,
                               out.cached_tokens, out.completion_tokens, out.logprobs, out.drafted, out.accepted)
