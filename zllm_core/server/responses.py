"""POST /v1/responses, GET and DELETE /v1/responses/{id}.

A `ResponseTurn` is one response.create, shared by HTTP and the WebSocket: it rebuilds the
conversation of previous_response_id, runs the generation, and records the conversation it ends
with so a later turn (or a restarted server) can continue it.
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request

from zllm_core.protocols import openai_responses as orr
from zllm_core.protocols.responses_stream import ResponsesStream
from zllm_core.protocols.canonical import Finish, ParsedOutput, RequestError, new_id
from zllm_core.server.body import FastBodyRoute
from zllm_core.server.disconnect import for_client
from zllm_core.server.generation import Admitted, encoded
from zllm_core.server.response_store import StoredResponse
from zllm_core.server.runtime import Runtime, runtime
from zllm_core.server.sse import event_frame, primed, sse_response

router = APIRouter(route_class=FastBodyRoute)
CLOSING = ("response.completed", "response.incomplete")  # a response to store
# A WebSocket keeps its latest turns for store: false continuations; agents continue the last.
RECENT_TURNS = 8


class ResponseTurn:
    def __init__(self, rt: Runtime, req: orr.ResponsesRequest, tenant: str,
                 recent: dict[str, StoredResponse] | None = None):
        rt.check_model(req.model)
        self.rt, self.req, self.tenant, self.recent = rt, req, tenant, recent
        previous = self.previous = self._previous()
        id = new_id("resp_")
        # A chain keeps its first response's id as its cache key, across turns and restarts.
        chain_key = previous.cache_key if previous and previous.cache_key else id
        history = previous.messages if previous else []
        self.canonical = orr.to_canonical(req, history, chain_key)
        self.encoder = ResponsesStream(req, id, req.model, self.canonical.sampling)

    def _previous(self) -> StoredResponse | None:
        pid = self.req.previous_response_id
        if not pid:
            return None
        record = (self.recent or {}).get(pid) or self.rt.store.get(self.tenant, pid)
        if record is None:
            raise RequestError(f"previous response '{pid}' was not found",
                               param="previous_response_id", status=404,
                               code="previous_response_not_found")
        return record

    async def events(self, stream: bool = True) -> AsyncIterator[dict[str, Any]]:
        """Admission comes first, before any payload, so its errors stay plain HTTP errors.
        A response is stored before its closing event: a client told it completed can
        continue it. A failure after the first payload is the stream's error event, or,
        not streaming, raised."""
        seen: list[Any] = []
        admitted = await self.rt.generation.admit(self.canonical, self.tenant)
        generation = self.rt.generation.stream(admitted, self.encoder.id)
        async for payload in encoded(self.encoder, _gathered(generation, seen), errors_in_stream=stream):
            if payload["type"] in CLOSING:
                try:
                    await self._remember(ParsedOutput.fold(seen), admitted)
                except RequestError as exc:  # the store failed: not stored, and the client is told
                    if not stream:
                        raise
                    yield self.encoder.error(exc)
                    return
            yield payload

    async def _remember(self, out: ParsedOutput, admitted: Admitted) -> None:
        # Instructions are per request: a continuation does not inherit them.
        history = self.canonical.messages[1 if self.req.instructions else 0:]
        parent = self.previous
        record = StoredResponse(self.encoder.id, self.encoder.response(), history + [out.message()],
                                self.canonical.cache_key, parent.id if parent else None,
                                len(parent.messages) if parent else 0)
        if self.req.store is not False:  # off the loop: it may wait for another process's lock
            await asyncio.to_thread(self.rt.store.put, self.tenant, record)
        for kept in (parent, record):  # in memory with the conversation, as long as it is kept
            held = self.rt.store.held(self.tenant, kept) if kept is not None else None
            if held is not None:
                self.rt.generation.prompts.hold(admitted.prompt, self.tenant, held)
        if self.recent is not None:
            self.recent[record.id] = record
            while len(self.recent) > RECENT_TURNS:
                del self.recent[next(iter(self.recent))]


async def _gathered(events: AsyncIterator[Any], seen: list[Any]) -> AsyncIterator[Any]:
    async for ev in events:
        if not isinstance(ev, Finish):
            seen.append(ev)
        yield ev


@router.post("/v1/responses")
async def create_response(body: orr.ResponsesRequest, request: Request) -> Any:
    turn = ResponseTurn(runtime(request), body, request.state.tenant)
    if not body.stream:
        return await for_client(request, _whole(turn))
    return sse_response(await for_client(request, primed(_frames(turn))))


async def _whole(turn: ResponseTurn) -> dict[str, Any]:
    async for _ in turn.events(stream=False):
        pass
    return turn.encoder.response()


async def _frames(turn: ResponseTurn) -> AsyncIterator[str]:
    async for payload in turn.events():
        yield event_frame(payload)


def _not_found(id: str) -> RequestError:
    return RequestError(f"response '{id}' was not found", param="response_id", status=404,
                        code="not_found")


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> dict[str, Any]:
    record = runtime(request).store.get(request.state.tenant, response_id)
    if record is None:
        raise _not_found(response_id)
    return record.response


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    if not await asyncio.to_thread(runtime(request).store.delete, request.state.tenant, response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response", "deleted": True}
