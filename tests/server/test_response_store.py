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


def turn(id, parent, messages):
    return StoredResponse(id, {"id": id, "object": "response"}, messages, "key",
                          parent.id if parent else None, len(parent.messages) if parent else 0)


def chain(store, turns):
    """Records of a conversation continued `turns` times, each adding a question and an answer."""
    records, messages = [], []
    for i in range(turns):
        messages = messages + [Message(role="user", content=f"q{i}"), Message(role="assistant", content=f"a{i}")]
        records.append(turn(f"resp_{i}", records[-1] if records else None, messages))
        store.put("t", records[-1])
    return records


def test_a_continuation_writes_only_its_own_messages_and_reads_back_whole(tmp_path):
    path = tmp_path / "store.sqlite3"
    records = chain(ResponseStore(path), 30)
    with sqlite3.connect(path) as db:
        sizes = [len(m) for (m,) in db.execute("SELECT messages FROM responses ORDER BY created_at")]
    assert max(sizes) < 300  # each row holds its own two messages, not the history
    got = ResponseStore(path).get("t", "resp_29")  # a new process reads the chain back
    assert got.messages == records[-1].messages


def test_recent_records_are_served_from_memory_with_their_messages():
    store = ResponseStore(":memory:")
    records = chain(store, 3)
    assert store.get("t", "resp_2") is records[-1]


def test_a_deleted_response_keeps_what_its_continuations_need(tmp_path):
    path = tmp_path / "store.sqlite3"
    store = ResponseStore(path)
    records = chain(store, 3)
    assert store.delete("t", "resp_1")
    assert store.get("t", "resp_1") is None and not store.delete("t", "resp_1")
    assert ResponseStore(path).get("t", "resp_2").messages == records[-1].messages
    assert store.delete("t", "resp_2") and ResponseStore(path).get("t", "resp_2") is None


def test_a_parent_the_store_lacks_makes_the_record_whole(tmp_path):
    """A continuation of a response that was never stored (store: false) holds all its messages."""
    path = tmp_path / "store.sqlite3"
    unstored = turn("resp_x", None, CONVERSATION)
    child = turn("resp_y", unstored, CONVERSATION + [Message(role="user", content="more")])
    ResponseStore(path).put("t", child)
    assert ResponseStore(path).get("t", "resp_y").messages == child.messages


def test_a_chain_with_a_damaged_ancestor_reads_as_missing(tmp_path):
    path = tmp_path / "store.sqlite3"
    chain(ResponseStore(path), 3)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE responses SET messages = ? WHERE id = 'resp_0'", ('[{"content": 3}]',))
    assert ResponseStore(path).get("t", "resp_2") is None


def test_a_file_from_before_chains_is_read_and_continued(tmp_path):
    path = tmp_path / "store.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE responses (tenant TEXT NOT NULL, id TEXT NOT NULL, created_at REAL NOT NULL, "
                   "response TEXT NOT NULL, messages TEXT NOT NULL, cache_key TEXT, PRIMARY KEY (tenant, id))")
        db.execute("INSERT INTO responses VALUES ('t', 'resp_old', 0, ?, ?, 'key')",
                   ('{"id": "resp_old", "object": "response"}', '[{"role": "user", "content": "hi"}]'))
    store = ResponseStore(path)
    old = store.get("t", "resp_old")
    store.put("t", turn("resp_new", old, old.messages + [Message(role="assistant", content="hello")]))
    assert [m.content for m in ResponseStore(path).get("t", "resp_new").messages] == ["hi", "hello"]
