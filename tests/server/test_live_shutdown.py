"""SIGTERM while streams run: each ends now with its protocol's error event and the process
exits cleanly, in well under the time the generations would have taken.

A real `zllm serve` process, the official SDKs as clients, a real directory for the SSD tier.
"""
from __future__ import annotations

import threading
import time

import anthropic
import openai

from tests.server.conftest import API_KEY, MODEL, start_server
from tests.server.test_live_ssd import ask, conversation, ssd_metrics

LONG = 8192  # output tokens: far more than the streams get to run


def _openai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


def chat_stream(server, messages):
    return _openai(server).chat.completions.create(model=MODEL, messages=messages, max_tokens=LONG,
                                                    temperature=0.0, stream=True)


def responses_stream(server, messages):
    return _openai(server).responses.create(model=MODEL, instructions=messages[0]["content"],
                                            input=messages[1]["content"], max_output_tokens=LONG,
                                            temperature=0.0, stream=True)


def messages_stream(server, messages):
    claude = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    return claude.messages.create(model=MODEL, system=messages[0]["content"], messages=messages[1:],
                                  max_tokens=LONG, stream=True)


class Reader(threading.Thread):
    """Reads one stream to its end, noting its first event and how it ended."""

    def __init__(self, open_stream, server, messages):
        super().__init__(daemon=True)
        self.open_stream, self.server, self.messages = open_stream, server, messages
        self.started, self.events, self.error = threading.Event(), 0, None

    def run(self) -> None:
        try:
            for _ in self.open_stream(self.server, self.messages):
                self.events += 1
                self.started.set()
        except Exception as exc:  # noqa: BLE001 - what the SDK raised is the result
            self.error = exc
        self.started.set()


def test_sigterm_ends_every_stream_with_its_error_event(tmp_path):
    store, ssd = tmp_path / "responses.sqlite3", str(tmp_path / "ssd")
    server = start_server(store, "--ssd-cache-dir", ssd, "--max-output-tokens", str(LONG))
    readers = [Reader(fn, server, conversation(i)) for i, fn in
               enumerate((chat_stream, responses_stream, messages_stream))]
    try:
        for r in readers:
            r.start()
        for r in readers:
            assert r.started.wait(120) and r.error is None, r.error
        server.process.terminate()
        start = time.monotonic()
        rc = server.process.wait(timeout=60)
        took = time.monotonic() - start
        for r in readers:
            r.join(10)
    finally:
        if server.process.poll() is None:
            server.process.kill()
    log = server.log.read_text()
    # uvicorn re-raises the signal it handled once it has shut down: death by SIGTERM, cleanly.
    assert rc == -15 and "Traceback" not in log and "Finished server process" in log, log[-3000:]
    assert took < 20, f"shutdown took {took:.1f} s"
    chat, responses, messages = readers
    assert isinstance(chat.error, openai.APIError) and "shutting down" in str(chat.error)
    assert isinstance(messages.error, anthropic.APIError) and "shutting down" in str(messages.error)
    # The Responses SDK ends on `response.failed` without raising: the stream was cut short.
    assert responses.error is None and 0 < responses.events

    # The aborted streams' prompts were backed up before the process died: a server restarted
    # on the same directory has nothing on its device, yet serves them from disk.
    restarted = start_server(store, "--ssd-cache-dir", ssd)
    try:
        for i in range(len(readers)):
            _, cached = ask(restarted, conversation(i))
            assert cached >= 1024, (i, cached)
        assert ssd_metrics(restarted)["hits"] == len(readers)
    finally:
        restarted.stop()

