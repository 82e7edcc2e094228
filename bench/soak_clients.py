"""The soak's clients: one agent request in each protocol through the official SDKs.

Each client turns a replayed call (system, tools, history) into its protocol's body and sends
it as a `Plan` says: streamed or not, a tool call forced, the client leaving after a few events.
Every stream is parsed by the SDK; one that ends without its protocol's closing event is
malformed.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import anthropic
import openai

from zllm_core.dialects.conversation import Message

CLOSING = {"chat": "finish_reason", "responses": ("response.completed", "response.incomplete"),
           "messages": "message_stop"}


@dataclass
class Call:
    system: str
    tools: list[dict[str, Any]]  # OpenAI Chat function tools, as the trace stores them
    history: list[Message]


@dataclass
class Plan:
    """What a client does with one request."""

    stream: bool
    forced: bool
    leave_after: int | None  # a stream closed after this many events
    cancel_after: float | None  # seconds after which the request's task is cancelled
    temperature: float


@dataclass
class Outcome:
    kind: str  # ok | left | cancelled | server_error | client_error | malformed
    detail: str = ""
    ttft: float | None = None  # seconds to the first stream event
    called: bool = False  # a tool call came out


class Streamed:
    """Counts a stream's events, its first one's time, and whether its closing event came."""

    def __init__(self, start: float, plan: Plan):
        self.start, self.plan, self.events, self.ttft, self.closed, self.called = start, plan, 0, None, False, False

    def see(self) -> bool:
        """True when the client leaves now."""
        self.events += 1
        if self.ttft is None:
            self.ttft = time.perf_counter() - self.start
        return self.plan.leave_after is not None and self.events >= self.plan.leave_after

    def outcome(self) -> Outcome:
        if self.plan.leave_after is not None and self.events >= self.plan.leave_after:
            return Outcome("left", ttft=self.ttft)
        if not self.closed:
            return Outcome("malformed", f"stream ended after {self.events} events without its closing event",
                           self.ttft)
        return Outcome("ok", ttft=self.ttft, called=self.called)


def _args(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {}


class SDKClient:
    """A protocol's client: the official SDK's, and the model it asks for."""

    def __init__(self, client: Any, model: str):
        self.client, self.model = client, model


class ChatClient(SDKClient):
    def body(self, call: Call, plan: Plan, max_tokens: int) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": call.system}]
        for m in call.history:
            if m.role == "tool":
                messages.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
            elif m.tool_calls:
                messages.append({"role": "assistant", "content": m.content or None, "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls]})
            else:
                messages.append({"role": m.role, "content": m.content})
        return {"model": self.model, "messages": messages, "tools": call.tools, "max_tokens": max_tokens,
                "temperature": plan.temperature, "tool_choice": "required" if plan.forced else "auto"}

    async def send(self, call: Call, plan: Plan, max_tokens: int) -> Outcome:
        body = self.body(call, plan, max_tokens)
        if not plan.stream:
            reply = await self.client.chat.completions.create(**body)
            return Outcome("ok", called=bool(reply.choices[0].message.tool_calls))
        seen = Streamed(time.perf_counter(), plan)
        async with await self.client.chat.completions.create(**body, stream=True) as stream:
            async for chunk in stream:
                if chunk.choices:
                    seen.called |= bool(chunk.choices[0].delta.tool_calls)
                    seen.closed |= chunk.choices[0].finish_reason is not None
                if seen.see():
                    break
        return seen.outcome()


class ResponsesClient(SDKClient):
    def body(self, call: Call, plan: Plan, max_tokens: int) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for m in call.history:
            if m.role == "tool":
                items.append({"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content})
                continue
            if m.content or not m.tool_calls:
                items.append({"role": m.role, "content": m.content})
            items += [{"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
                      for c in m.tool_calls]
        tools = [{"type": "function", **t["function"]} for t in call.tools]
        return {"model": self.model, "instructions": call.system, "input": items, "tools": tools,
                "max_output_tokens": max_tokens, "temperature": plan.temperature, "store": False,
                "tool_choice": "required" if plan.forced else "auto"}

    async def send(self, call: Call, plan: Plan, max_tokens: int) -> Outcome:
        body = self.body(call, plan, max_tokens)
        if not plan.stream:
            reply = await self.client.responses.create(**body)
            return Outcome("ok", called=any(item.type == "function_call" for item in reply.output))
        seen = Streamed(time.perf_counter(), plan)
        async with await self.client.responses.create(**body, stream=True) as stream:
            async for event in stream:
                failed = _responses_event(event, seen)
                if failed is not None:
                    return failed
                if seen.see():
                    break
        return seen.outcome()


def _responses_event(event: Any, seen: Streamed) -> Outcome | None:
    """A Responses event into `seen`; an Outcome when it is an error (the SDK does not raise)."""
    if event.type in ("error", "response.failed"):
        # A WebSocket error frame carries its status: a refused request there is the client's.
        kind = "client_error" if (getattr(event, "status", None) or 500) < 500 else "server_error"
        return Outcome(kind, f"{event.type}: {event.model_dump_json()[:300]}", seen.ttft)
    seen.called |= event.type == "response.output_item.added" and event.item.type == "function_call"
    seen.closed |= event.type in CLOSING["responses"]
    return None


class SocketClient(ResponsesClient):
    """Responses over the WebSocket: one connection per session, opened again after the
    client closed it mid-response."""

    def __init__(self, client: openai.AsyncOpenAI, model: str):
        super().__init__(client, model)
        self.manager: Any = None
        self.connection: Any = None

    async def send(self, call: Call, plan: Plan, max_tokens: int) -> Outcome:
        if self.connection is None:
            self.manager = self.client.responses.connect(max_retries=0)
            self.connection = await self.manager.__aenter__()
        body = self.body(call, plan, max_tokens)
        seen = Streamed(time.perf_counter(), plan)
        try:
            await self.connection.response.create(**body)
            async for event in self.connection:
                failed = _responses_event(event, seen)
                if failed is not None:
                    return failed
                if seen.see():
                    await self.close()  # leaving mid-response: the socket closes under it
                    break
                if seen.closed:
                    break
        except BaseException:
            await self.close()
            raise
        return seen.outcome()

    async def close(self) -> None:
        if self.manager is not None:
            manager, self.manager, self.connection = self.manager, None, None
            await manager.__aexit__(None, None, None)


class MessagesClient(SDKClient):
    def body(self, call: Call, plan: Plan, max_tokens: int) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        for m in call.history:
            if m.role == "tool":
                role, blocks = "user", [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}]
            else:
                role = m.role
                blocks = [{"type": "text", "text": m.content}] if m.content else []
                blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _args(c.arguments)}
                           for c in m.tool_calls]
            if messages and messages[-1]["role"] == role:  # Messages alternates roles
                messages[-1]["content"] += blocks
            else:
                messages.append({"role": role, "content": blocks})
        tools = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                  "input_schema": t["function"]["parameters"]} for t in call.tools]
        return {"model": self.model, "system": call.system, "messages": messages, "tools": tools,
                "max_tokens": max_tokens, "extra_body": {"temperature": plan.temperature},
                "tool_choice": {"type": "any" if plan.forced else "auto"}}

    async def send(self, call: Call, plan: Plan, max_tokens: int) -> Outcome:
        body = self.body(call, plan, max_tokens)
        if not plan.stream:
            reply = await self.client.messages.create(**body)
            return Outcome("ok", called=any(b.type == "tool_use" for b in reply.content))
        seen = Streamed(time.perf_counter(), plan)
        async with await self.client.messages.create(**body, stream=True) as stream:
            async for event in stream:
                seen.called |= event.type == "content_block_start" and event.content_block.type == "tool_use"
                seen.closed |= event.type == CLOSING["messages"]
                if seen.see():
                    break
        return seen.outcome()
