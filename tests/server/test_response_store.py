"""The response store keeps conversations per tenant, across reopenings, and distrusts what it reads."""
import sqlite3

from zllm_core.protocols.canonical import Message, ToolCall
from zllm_core.server.response_store import ResponseStore, StoredResponse

CONVERSATION = [Message(role="user", content="hi"),
                Message(role="assistant", content="", reasoning="think",
                        tool_calls=(ToolCall(id="c1", name="f", arguments='{"a": 1}'),))]


def record(id="resp_1"):
    return StoredResponse(id, {"id": id, "object": "response"}, CONVERSATION, "key")


def test_a_record_survives_reopening_the_file(tmp_path):
    path = tmp_path / "store.sqlite3"
    ResponseStore(path).put("t", record())
    got = ResponseStore(path).get("t", "resp_1")
    assert got.messages == CONVERSATION and got.cache_key == "key"


def test_records_are_scoped_by_tenant():
    store = ResponseStore(":memory:")
    store.put("alice", record())
    assert store.get("bob", "resp_1") is None
    assert not store.delete("bob", "resp_1")
    assert store.delete("alice", "resp_1") and store.get("alice", "resp_1") is None


def test_a_corrupt_record_reads_as_missing(tmp_path):
    path = tmp_path / "store.sqlite3"
    ResponseStore(path).put("t", record())
    with sqlite3.connect(path) as db:
        db.execute("UPDATE responses SET messages = ?", ('[{"content": 3}]',))
    assert ResponseStore(path).get("t", "resp_1") is None
