"""POST /v1/chat/completions."""
from __future__ import annotations

from typing import Any, AsyncIterator

from fastapi import APIRouter, Request

from zllm_core.protocols import openai_chat
from zllm_core.protocols.canonical import new_id
from zllm_core.server.body import FastBodyRoute
from zllm_core.server.disconnect import for_client
from zllm_core.server.generation import collect, encoded
from zllm_core.server.runtime import runtime
from zllm_core.server.sse import data_frame, primed, sse_response

router = APIRouter(route_class=FastBodyRoute)


@router.post("/v1/chat/completions")
async def chat_completions(body: openai_chat.ChatRequest, request: Request) -> Any:
    rt = runtime(request)
    rt.check_model(body.model)
    admitted = await rt.generation.admit(openai_chat.to_canonical(body), request.state.tenant)
    id = new_id("chatcmpl-")
    events = rt.generation.stream(admitted, id)
    if not admitted.request.stream:
        out, finish, logprobs = await for_client(request, collect(events))
        return openai_chat.completion(id, body.model, out, finish, logprobs if body.logprobs else None)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    encoder = openai_chat.ChatStream(id, body.model, include_usage)
    return sse_response(await for_client(request, primed(_frames(encoder, events))))


async def _frames(encoder: openai_chat.ChatStream, events: AsyncIterator[Any]) -> AsyncIterator[str]:
    async for payload in encoded(encoder, events):
        yield data_frame(payload)
    yield "data: [DONE]\n\n"
