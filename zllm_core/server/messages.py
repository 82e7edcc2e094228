"""POST /v1/messages and POST /v1/messages/count_tokens (Anthropic)."""
from __future__ import annotations

from typing import Any, AsyncIterator

from fastapi import APIRouter, Request

from zllm_core.protocols import anthropic_messages as am
from zllm_core.protocols.canonical import new_id
from zllm_core.server.body import FastBodyRoute
from zllm_core.server.disconnect import for_client
from zllm_core.server.generation import collect, encoded
from zllm_core.server.runtime import runtime
from zllm_core.server.sse import event_frame, primed, sse_response

router = APIRouter(route_class=FastBodyRoute)


@router.post("/v1/messages")
async def create_message(body: am.MessagesRequest, request: Request) -> Any:
    rt = runtime(request)
    rt.check_model(body.model)
    admitted = await rt.generation.admit(am.to_canonical(body, rt.generation.calls.get), request.state.tenant)
    id = new_id("msg_")
    events = rt.generation.stream(admitted, id)
    if not admitted.request.stream:
        out, finish, _ = await for_client(request, collect(events))  # Messages has no logprobs
        return am.message(id, body.model, out, finish)
    encoder = am.MessagesStream(id, body.model, len(admitted.prompt.token_ids))
    return sse_response(await for_client(request, primed(_frames(encoder, events))))


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: am.CountTokensRequest, request: Request) -> dict[str, int]:
    rt = runtime(request)
    rt.check_model(body.model)
    canonical = am.to_canonical(body, rt.generation.calls.get)
    return {"input_tokens": len((await rt.generation.prompt(canonical, request.state.tenant)).token_ids)}


async def _frames(encoder: am.MessagesStream, events: AsyncIterator[Any]) -> AsyncIterator[str]:
    async for payload in encoded(encoder, events):
        yield event_frame(payload)
