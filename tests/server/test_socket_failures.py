"""The Responses WebSocket answers every response.create, even when our side fails.

Faults are injected at the two boundaries a bug can come from (the response store while the
turn is built, the engine while it runs); the app, template and tokenizer are the real ones.
"""
import json
import sqlite3
import threading

import pytest
from starlette.testclient import TestClient

from zllm_core.model.model_names import resolve_model
from zllm_core.server.app import create_app
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.response_store import ResponseStore
from zllm_core.server.runtime import ServerConfig
from zllm_core.tokenizer import Tokenizer

MODEL = "zllm-demo"


class BrokenEngine:
    max_model_len = 4096

    def metrics(self):
        return {}

    async def generate(self, *args, **kwargs):
        raise RuntimeError("engine bug")
        yield


class BrokenStore(ResponseStore):
    def get(self, tenant, id):
        raise sqlite3.DatabaseError("disk I/O error")


@pytest.fixture(scope="module")
def client():
    model_dir = resolve_model(MODEL)
    prompts = PromptBuilder.from_model_dir(model_dir, Tokenizer.from_pretrained(model_dir))
    app = create_app(BrokenEngine(), prompts, ServerConfig(model_name=MODEL))
    app.state.runtime.store = BrokenStore(":memory:")
    with TestClient(app) as client:
        yield client


def receive(ws, timeout=20.0):
    """The next frame, or a failure instead of waiting forever for one that never comes."""
    got = []
    reader = threading.Thread(target=lambda: got.append(ws.receive_json()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not got:
        pytest.fail("no frame arrived: the server never answered the response.create")
    return got[0]


def create(ws, **fields):
    ws.send_text(json.dumps({"type": "response.create", "model": MODEL, "input": "hi", **fields}))
    return receive(ws)


def assert_server_error(frame):
    assert frame["type"] == "error" and frame["status"] == 500, frame
    assert frame["error"]["type"] == "server_error"
    assert "bug" not in frame["error"]["message"] and "disk" not in frame["error"]["message"]


def test_failures_answer_with_a_500_frame_and_keep_the_socket_usable(client, caplog):
    with caplog.at_level("ERROR", logger="zllm.server"), \
            client.websocket_connect("/v1/responses") as ws:
        assert_server_error(create(ws, previous_response_id="resp_x"))  # building the turn
        assert_server_error(create(ws))  # running it
        assert_server_error(create(ws))  # and the connection still takes the next one
        bad = create(ws, model="nope")
        assert bad["status"] == 404 and bad["error"]["type"] == "invalid_request_error"
    logged = " ".join(r.exc_text or "" for r in caplog.records)
    assert "disk I/O error" in logged and "engine bug" in logged
