"""An asyncio front for the engine: the step loop runs on its own thread, requests stream events.

Everything that touches engine state (adding, aborting, stepping) happens on the engine
thread; the event loop only submits commands and receives token ids, which each request's
output processor turns into text on the loop.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
from typing import Any, AsyncIterator, Callable, Optional

import numpy as np

from zllm_core.cache.scope import CacheHint
from zllm_core.cache.token_ids import TokenIds, is_frozen
from zllm_core.engine.heap_trim import HeapTrimmer
from zllm_core.engine.llm_engine import EngineConfig, LLMEngine
from zllm_core.engine.output_processor import GenerationEvent, OutputProcessor
from zllm_core.engine.sampling_params import SamplingParams

log = logging.getLogger("zllm.engine")


class EngineError(RuntimeError):
    """A request the engine refused (``refused``: bad prompt or parameters, the client's
    fault) or one that failed while running (the server's)."""

    def __init__(self, message: str, refused: bool):
        super().__init__(message)
        self.refused = refused


class EngineShutdown(EngineError):
    """The engine stopped (the server is shutting down); the request may be retried elsewhere."""

    def __init__(self) -> None:
        super().__init__("the server is shutting down", refused=False)


def prompt_snapshot(prompt_ids: TokenIds) -> np.ndarray:
    """The prompt as the engine thread will read it later: a frozen array (the tokenizer's)
    as it is, anything else copied now, read-only, so the caller may reuse its own."""
    if is_frozen(prompt_ids):
        return prompt_ids
    prompt = np.array(prompt_ids)
    prompt.flags.writeable = False
    return prompt


class AsyncEngine:
    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._sinks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._ids = itertools.count()
        self._wake = threading.Event()
        self._closed = False
        self._heap = HeapTrimmer()
        self._thread = threading.Thread(target=self._loop, name="zllm-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_model(cls, model: str = "zllm-demo", **config) -> "AsyncEngine":
        return cls(LLMEngine.from_config(EngineConfig(model=model, **config)))

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def model_config(self):
        return self.engine.model.config

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    def metrics(self) -> dict[str, Any]:
        """The engine's counters, read from the caller's thread (see LLMEngine.metrics)."""
        return self.engine.metrics()

    async def generate(self, prompt_ids: TokenIds, params: SamplingParams,
                       request_id: Optional[str] = None,
                       cache: Optional[CacheHint] = CacheHint()) -> AsyncIterator[GenerationEvent]:
        """Stream a request's events; ``prompt_ids`` is an integer array (or a list)."""
        rid = request_id or f"req-{next(self._ids)}"
        if self._closed:
            raise EngineShutdown()
        if rid in self._sinks:
            raise EngineError(f"request id {rid!r} is already running", refused=True)
        try:
            prompt = prompt_snapshot(prompt_ids)
        except ValueError as exc:  # ragged nesting; the engine refuses every other bad prompt
            raise EngineError(f"prompt token ids: {exc}", refused=True) from None
        sink: asyncio.Queue = asyncio.Queue()
        self._sinks[rid] = (asyncio.get_running_loop(), sink)
        self._submit(("add", rid, prompt, params, cache))
        tokenizer = self.engine.tokenizer
        processor = OutputProcessor(tokenizer.decode_bytes if tokenizer is not None else None, params.stop)
        finished = False
        try:
            while True:
                item = await sink.get()
                if isinstance(item, Exception):
                    finished = True
                    raise item
                event = processor.process(item)
                if event.finish_reason is not None and item.finish_reason is None:
                    self._submit(("abort", rid, "stop", False))  # a stop string: the engine has not seen it
                finished = event.finish_reason is not None
                yield event
                if finished:
                    return
        finally:
            self._sinks.pop(rid, None)
            if not finished:  # the consumer went away: free the request's blocks
                self._submit(("abort", rid, "abort", False))

    def abort(self, request_id: str) -> None:
        """End a request; its stream receives a final ``abort`` event."""
        self._submit(("abort", request_id, "abort", True))

    def forget(self, cache: CacheHint) -> None:
        """Release the prefix cache's terminal states of the conversation `cache` names (the
        server's conversation clock evicted it); one way, like an abort."""
        self._submit(("forget", cache))

    def stop(self) -> None:
        """Take no more requests and end every running one with EngineShutdown, without
        waiting (safe in a signal handler: it only sets flags)."""
        self._closed = True
        self._wake.set()

    def shutdown(self) -> None:
        self.stop()
        self._thread.join(timeout=10)
        if not self._thread.is_alive():  # the engine is ours alone again
            self.engine.close()

    # -- engine thread ------------------------------------------------------------------

    def _submit(self, command: tuple) -> None:
        self._commands.put(command)
        self._wake.set()

    def _loop(self) -> None:
        while not self._closed:
            try:
                self._turn()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any one failure
                log.exception("engine step failed")
                self._fail_all(lambda: EngineError(f"engine step failed: {exc}", refused=False))
        self._fail_all(EngineShutdown)

    def _turn(self) -> None:
        self._drain_commands()
        self._heap.maybe_trim()
        if not self.engine.has_unfinished():
            self._wake.wait(timeout=0.5)
            self._wake.clear()
            return
        for out in self.engine.step():
            self._deliver(out.request_id, EngineError(out.error, refused=False) if out.error else out)

    def _drain_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if command[0] == "add":
                _, rid, prompt_ids, params, cache = command
                try:
                    self.engine.add_request(rid, prompt_ids, params, cache)
                except ValueError as exc:
                    self._deliver(rid, EngineError(str(exc), refused=True))
            elif command[0] == "forget":
                self.engine.forget(command[1])
            else:
                # Only an abort from outside has a stream waiting for it: after a stream's own
                # end the id may already name a new request.
                _, rid, reason, notify = command
                out = self.engine.abort(rid, reason)
                if out is not None and notify:
                    self._deliver(rid, out)

    def _fail_all(self, error: Callable[[], EngineError]) -> None:
        self.engine.abort_all()
        for rid in list(self._sinks):
            self._deliver(rid, error())

    def _deliver(self, rid: str, item) -> None:
        target = self._sinks.get(rid)
        if target is None:
            return
        loop, sink = target
        try:
            loop.call_soon_threadsafe(sink.put_nowait, item)
        except RuntimeError:  # that client's event loop is gone; nobody is waiting
            self._sinks.pop(rid, None)

