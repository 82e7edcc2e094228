"""The response store keeps conversations per tenant, across reopenings, and distrusts what it
reads; in a SQLite file and in PostgreSQL alike (a real server, tests/postgres_server.py)."""
import sqlite3
import threading

import psycopg
import pytest

from zllm_core.protocols.canonical import Message, RequestError, ToolCall
from zllm_core.server.response_store import ResponseStore, StoredResponse

CONVERSATION = [Message(role="user", content="hi"),
                Message(role="assistant", content="", reasoning="think",
                        tool_calls=(ToolCall(id="c1", name="f", arguments='{"a": 1}'),))]


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path):
    """Where a new, empty store lives: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "store.sqlite3")
    return request.getfixturevalue("postgres").new_database()


def query(location, sql, *params):
    """`sql` run on the store's database behind its back (`?` parameters)."""
    if location.startswith("postgresql://"):
        with psycopg.connect(location, autocommit=True) as conn:
            cursor = conn.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []
    with sqlite3.connect(location) as db:
        return db.execute(sql, params).fetchall()


def record(id="resp_1"):
    return StoredResponse(id, {"id": id, "object": "response"}, CONVERSATION, "key")


def test_a_record_survives_reopening_the_store(location):
    ResponseStore(location).put("t", record())
    got = ResponseStore(location).get("t", "resp_1")
    assert got.messages == CONVERSATION and got.cache_key == "key"


def test_records_are_scoped_by_tenant(location):
    store = ResponseStore(location)
    store.put("alice", record())
    assert store.get("bob", "resp_1") is None
    assert not store.delete("bob", "resp_1")
    assert store.delete("alice", "resp_1") and store.get("alice", "resp_1") is None


def test_a_corrupt_record_reads_as_missing(location):
    ResponseStore(location).put("t", record())
    query(location, "UPDATE responses SET messages = ?", '[{"content": 3}]')
    assert ResponseStore(location).get("t", "resp_1") is None


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


def test_a_continuation_writes_only_its_own_messages_and_reads_back_whole(location):
    records = chain(ResponseStore(location), 30)
    sizes = [len(m) for (m,) in query(location, "SELECT messages FROM responses ORDER BY created_at")]
    assert max(sizes) < 300  # each row holds its own two messages, not the history
    got = ResponseStore(location).get("t", "resp_29")  # a new process reads the chain back
    assert got.messages == records[-1].messages


def test_recent_records_are_served_from_memory_with_their_messages():
    store = ResponseStore(":memory:")
    records = chain(store, 3)
    assert store.get("t", "resp_2") is records[-1]


def test_a_deleted_response_keeps_what_its_continuations_need(location):
    store = ResponseStore(location)
    records = chain(store, 3)
    assert store.delete("t", "resp_1")
    assert store.get("t", "resp_1") is None and not store.delete("t", "resp_1")
    assert ResponseStore(location).get("t", "resp_2").messages == records[-1].messages
    assert store.delete("t", "resp_2") and ResponseStore(location).get("t", "resp_2") is None


def test_a_parent_the_store_lacks_makes_the_record_whole(location):
    """A continuation of a response that was never stored (store: false) holds all its messages."""
    unstored = turn("resp_x", None, CONVERSATION)
    child = turn("resp_y", unstored, CONVERSATION + [Message(role="user", content="more")])
    ResponseStore(location).put("t", child)
    assert ResponseStore(location).get("t", "resp_y").messages == child.messages


def test_a_chain_with_a_damaged_ancestor_reads_as_missing(location):
    chain(ResponseStore(location), 3)
    query(location, "UPDATE responses SET messages = ? WHERE id = 'resp_0'", '[{"content": 3}]')
    assert ResponseStore(location).get("t", "resp_2") is None


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


def test_a_postgres_restart_costs_one_retryable_failure_and_no_record(postgres):
    location = postgres.new_database()
    store = ResponseStore(location)
    records = chain(store, 2)
    postgres.restart()  # the store's connection is cut
    with pytest.raises(RequestError) as cut:
        store.get("t", "resp_1")
    assert cut.value.status == 503 and cut.value.code == "response_store_busy"
    store.put("t", turn("resp_2", records[-1], records[-1].messages + [Message(role="user", content="again")]))
    assert ResponseStore(location).get("t", "resp_2").messages[-1].content == "again"


def test_a_postgres_row_held_by_another_writer_fails_after_the_wait_then_passes(postgres):
    """A delete waits for the row a continuation of another ingress holds, up to busy_seconds."""
    location = postgres.new_database()
    store = ResponseStore(location, busy_seconds=1)
    records = chain(store, 1)
    holding, release = threading.Event(), threading.Event()

    def other_ingress():
        with psycopg.connect(location) as conn:  # a transaction that locks the parent's row
            conn.execute("SELECT 1 FROM responses WHERE id = 'resp_0' FOR SHARE")
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=other_ingress)
    holder.start()
    holding.wait(30)
    with pytest.raises(RequestError) as busy:
        store.delete("t", "resp_0")
    assert busy.value.status == 503 and "could not delete response 'resp_0'" in busy.value.message
    release.set()
    holder.join()
    assert store.get("t", "resp_0").messages == records[0].messages  # nothing half-done
    assert store.delete("t", "resp_0") and store.get("t", "resp_0") is None
