"""One request through the engine: admit (prompt ids, limits), then stream canonical output events.

`Generation.stream` yields the dialect parser's events and ends with one `Finish`. Closing the
iterator (a client that went away) closes the engine stream, which aborts the request and frees
its blocks. While it runs its conversation is not evicted; a normal finish files the cache's
terminal state with the conversation, which releases it (`forget`, down to the engine) when
the conversation clock evicts the conversation.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence, TypeVar, Union

import numpy as np

from zllm_core.cache.scope import CacheHint
from zllm_core.cache.terminal_sessions import BYTES_PER_TOKEN
from zllm_core.conversation_clock import Held
from zllm_core.engine.async_engine import EngineError, EngineShutdown
from zllm_core.fence.factory import FenceFactory
from zllm_core.fence.grammar import FenceError
from zllm_core.fence.guard import GuardConfig
from zllm_core.fence.json_schema import UnsupportedSchema
from zllm_core.fence.token_fence import TokenFence
from zllm_core.protocols.canonical import (
    CanonicalRequest, Finish, LogprobEntry, Logprobs, OutputEvent, ParsedOutput, RequestError,
    ToolCallStart, Usage,
)
from zllm_core.server import access_log
from zllm_core.server.metrics import ServerMetrics
from zllm_core.server.prompt import Prompt, PromptBuilder
from zllm_core.server.tenant_limits import TenantLimiter, TenantQuota, Ticket
from zllm_core.server.tool_call_memory import ToolCallMemory

log = logging.getLogger("zllm.server")
# AsyncEngine.generate's shape: (prompt ids, SamplingParams, request_id=, cache=CacheHint) streaming
# GenerationEvents; the request's fence, if any, rides in the params for the generator to apply.
Generate = Callable[..., AsyncIterator[Any]]
Forget = Callable[[CacheHint], None]  # AsyncEngine.forget: the cache drops an id's terminal states
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    max_model_len: int
    max_output_tokens: int
    loop_guard: GuardConfig | None = None  # None: generations may repeat themselves
    request_timeout: float | None = None  # seconds from arrival to the last token; None: none
    quota: TenantQuota = TenantQuota()


@dataclass
class Admitted:
    """A request checked against the model's limits, with the exact tokens it will be given."""

    request: CanonicalRequest
    prompt: Prompt
    tenant: str  # scopes the tokenizer session and the prefix cache to the caller's API key
    ticket: Ticket  # the tenant's slot it runs in, or waits for
    arrived: float = field(default_factory=time.perf_counter)  # before the prompt was built


class Generation:
    def __init__(self, generate: Generate, end_ids: Callable[[], Sequence[int]], prompts: PromptBuilder,
                 limits: Limits, metrics: ServerMetrics, forget: Forget | None = None):
        """`end_ids()` gives the ids that end a turn; it is asked on the first fenced request.
        Without `forget` the cache bounds its terminal states alone."""
        self.generate, self.prompts, self.limits, self.metrics = generate, prompts, limits, metrics
        self.forget = forget
        self.running = 0  # engine streams open now (/health reports it)
        self.calls = ToolCallMemory()
        self.tenants = TenantLimiter(limits.quota)
        self.fences = FenceFactory(prompts.dialect, lambda tags: prompts.fence_vocab(end_ids(), tags))
        self._compiles = ThreadPoolExecutor(max_workers=2, thread_name_prefix="zllm-fence")

    async def prompt(self, req: CanonicalRequest, tenant: str = "") -> Prompt:
        """The request's prompt, rendered and tokenized off the event loop: a 1M-character
        conversation must not stall every other stream (the tokenizer releases the GIL)."""
        return await asyncio.to_thread(self.prompts.build, req, tenant)

    async def admit(self, req: CanonicalRequest, tenant: str = "") -> Admitted:
        """The tenant's queue is checked first, so a refused request costs no prompt build;
        a queued one builds its prompt while it waits. The ticket is released by `stream`."""
        arrived = time.perf_counter()
        ticket = self.tenants.enter(tenant)
        try:
            return await self._admit(req, tenant, ticket, arrived)
        except BaseException:
            ticket.release()
            raise

    async def _admit(self, req: CanonicalRequest, tenant: str, ticket: Ticket, arrived: float) -> Admitted:
        prompt = await self.prompt(req, tenant)
        ids = prompt.token_ids
        room = self.limits.max_model_len - len(ids)
        if room < 1:
            raise RequestError(
                f"the prompt is {len(ids)} tokens but this model's context length is "
                f"{self.limits.max_model_len} tokens (at least one must remain for the output)",
                param="messages", code="context_length_exceeded")
        cap = min(self.limits.max_output_tokens, room)
        max_tokens = min(req.max_tokens_requested or cap, cap)
        # Its own threads: a slow schema must not hold up the prompt builds of other requests.
        fence = await asyncio.get_running_loop().run_in_executor(self._compiles, self._fence, req, prompt, max_tokens)
        return Admitted(replace(req, sampling=replace(req.sampling, max_tokens=max_tokens, fence=fence)),
                        prompt, tenant, ticket, arrived)

    def _fence(self, req: CanonicalRequest, prompt: Prompt, max_tokens: int) -> TokenFence | None:
        """The request's token fence (tool calls, JSON output), compiled before anything reaches
        the engine, so a schema the fence cannot enforce is the client's 400."""
        param = "response_format" if req.response_format is not None else "tools"
        if req.response_format is not None and req.tools and req.tool_choice.mode in ("required", "named"):
            raise RequestError("a response format and a forced tool_choice cannot both hold; "
                               "drop one of them", param="tool_choice")
        try:
            return self.fences.for_request(req.tools, req.tool_choice, req.response_format,
                                           prompt.in_reasoning, max_tokens, self.limits.loop_guard)
        except (FenceError, UnsupportedSchema) as exc:
            raise RequestError(f"{param}: {exc}", param=param) from None
        except RecursionError:
            raise RequestError(f"{param}: the schema is nested too deeply", param=param) from None

    async def stream(self, admitted: Admitted, request_id: str) -> AsyncIterator[Union[OutputEvent, Finish]]:
        """Tool-call ids hash the request id, so the same function called in two requests gets
        two ids."""
        with self.prompts.in_use(admitted.prompt, admitted.tenant):
            async with contextlib.aclosing(self._events(admitted, request_id)) as events:
                async for ev in events:
                    yield ev

    async def _events(self, admitted: Admitted, request_id: str) -> AsyncIterator[Union[OutputEvent, Finish]]:
        parser = self.prompts.parser(admitted.request, admitted.prompt, request_id)
        recorder = self.calls.watch()
        called = False
        last = None
        generated: list[int] = []
        # The conversation's one identity (the request's key, else its tokenizer session's):
        # a hint the cache verifies token by token.
        hint = CacheHint(tenant=admitted.tenant, cache_id=admitted.prompt.conversation)
        clock = _Clock(admitted.arrived, self.metrics)
        deadline = _Deadline(admitted.arrived, self.limits.request_timeout)
        try:
            await deadline.bound(admitted.ticket.wait())
            engine_stream = self.generate(admitted.prompt.token_ids, admitted.request.sampling,
                                          request_id=request_id, cache=hint)
            async with self._running(engine_stream):
                async for last in deadline.events(engine_stream):
                    clock.tick()
                    generated += last.token_ids
                    if last.logprobs:
                        yield self._logprobs(last.logprobs)
                    for ev in parser.feed(last.text):
                        called |= isinstance(ev, ToolCallStart)
                        recorder.see(ev)
                        yield ev
        except EngineShutdown as exc:
            raise RequestError(str(exc), status=503, code="shutting_down") from None
        except EngineError as exc:
            # A refusal is the client's request (400); a failure while running is ours (500).
            raise RequestError(str(exc), status=400 if exc.refused else 500,
                               code=None if exc.refused else "engine_error") from None
        finally:
            admitted.ticket.release()
        if last.finish_reason in ("stop", "length"):  # not an abort: the client has no answer to resend
            # Off the loop: it decodes the answer and may wait for another prompt's build (the
            # tokenizer's lock); the ids themselves are extended in place (tokenizer/id_run.py).
            await asyncio.to_thread(self.prompts.record, admitted.prompt, np.asarray(generated, np.uint32),
                                    admitted.tenant)
            self._hold_terminal(admitted, hint, len(admitted.prompt.token_ids) + len(generated))
        for ev in parser.finish():
            called |= isinstance(ev, ToolCallStart)
            recorder.see(ev)
            yield ev
        reason = "tool_calls" if called and last.finish_reason == "stop" else last.finish_reason
        usage = Usage(last.prompt_tokens, last.completion_tokens, last.cached_tokens)
        clock.done(usage, last.drafted, last.accepted)
        yield Finish(reason, usage, last.stop_string)

    def _hold_terminal(self, admitted: Admitted, hint: CacheHint, tokens: int) -> None:
        """The cache now keeps the conversation's terminal state under the hint's id."""
        if self.forget is not None:
            held = Held("terminal", (hint.tenant, hint.cache_id), tokens * BYTES_PER_TOKEN, partial(self.forget, hint))
            self.prompts.hold(admitted.prompt, admitted.tenant, held)

    @contextlib.asynccontextmanager
    async def _running(self, engine_stream: AsyncIterator[Any]) -> AsyncIterator[None]:
        """Counts the open engine stream, and closes it (aborting the request) however it ends."""
        self.running += 1
        try:
            async with contextlib.aclosing(engine_stream):
                yield
        finally:
            self.running -= 1

    def _logprobs(self, tokens: list[Any]) -> Logprobs:
        """Engine logprobs (token ids) as the protocols report them (token bytes)."""
        text = self.prompts.token_bytes
        return Logprobs(tuple(LogprobEntry(text(t.token_id), t.logprob,
                                           tuple((text(i), lp) for i, lp in t.top)) for t in tokens))


class _Deadline:
    """A request's time limit, counted from its arrival: waiting for its tenant's slot counts."""

    def __init__(self, arrived: float, timeout: float | None):
        self.timeout = timeout
        self.at = None if timeout is None else arrived + timeout

    async def bound(self, step: Awaitable[T]) -> T:
        if self.at is None:
            return await step
        try:
            return await asyncio.wait_for(step, self.at - time.perf_counter())
        except TimeoutError:
            raise RequestError(f"the request did not finish within the server's time limit of "
                               f"{self.timeout:g} seconds", status=504, code="timeout") from None

    async def events(self, stream: AsyncIterator[T]) -> AsyncIterator[T]:
        """`stream`'s items, each awaited within the limit; a timeout cancels the pending
        read, which aborts the engine request."""
        if self.at is None:
            async for item in stream:
                yield item
            return
        while True:
            try:
                item = await self.bound(anext(stream))
            except StopAsyncIteration:
                return
            yield item


class _Clock:
    """Time to first token and between engine events, into the histograms and the access line."""

    def __init__(self, arrived: float, metrics: ServerMetrics):
        self.last, self.metrics, self.ttft = arrived, metrics, None

    def tick(self) -> None:
        now = time.perf_counter()
        if self.ttft is None:
            self.ttft = now - self.last
            self.metrics.ttft.observe(self.ttft)
        else:
            self.metrics.itl.observe(now - self.last)
        self.last = now

    def done(self, usage: Usage, drafted: int = 0, accepted: int = 0) -> None:
        access = access_log.current.get()
        if access is not None:
            access.prompt_tokens, access.completion_tokens = usage.prompt_tokens, usage.completion_tokens
            access.cached_tokens, access.ttft = usage.cached_tokens, self.ttft
            access.drafted, access.accepted = drafted, accepted


async def collect(events: AsyncIterator[Union[OutputEvent, Finish]]
                  ) -> tuple[ParsedOutput, Finish, list[LogprobEntry]]:
    """A whole generation folded for a non-streaming response, with its tokens' logprobs."""
    seen, logprobs = [], []
    async for ev in events:
        if isinstance(ev, Finish):
            return ParsedOutput.fold(seen), ev, logprobs
        if isinstance(ev, Logprobs):
            logprobs += ev.entries
        else:
            seen.append(ev)
    raise RuntimeError("generation ended without a Finish event")


async def encoded(encoder: Any, events: AsyncIterator[Union[OutputEvent, Finish]],
                  errors_in_stream: bool = True) -> AsyncIterator[dict[str, Any]]:
    """A protocol encoder (start / event / finish / error) run over a generation's events.

    The opening payloads wait for the first event, so a request the engine refuses fails
    before anything is sent; a failure after that, ours included (a parser bug), becomes the
    protocol's in-stream error, so every stream ends with its closing event. Without
    ``errors_in_stream`` (a whole response built from the payloads) it is raised instead.
    """
    started = False
    try:
        async for ev in events:
            payloads = [] if started else encoder.start()
            started = True
            payloads += encoder.finish(ev) if isinstance(ev, Finish) else encoder.event(ev)
            for payload in payloads:
                yield payload
    except Exception as exc:
        if not started:
            raise
        if not isinstance(exc, RequestError):
            log.exception("generation failed mid-stream")
            exc = RequestError("internal server error", status=500, code="internal_error")
        if not errors_in_stream:
            raise exc from None
        yield encoder.error(exc)
