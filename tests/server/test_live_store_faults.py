"""The response store's SQLite file under faults, with a real server, a real second process and
real files: another process holding the write lock, and garbage bytes in the file. No stored
response is lost, a response that could not be stored is said so clearly, nothing crashes."""
import os
import re
import sqlite3
import subprocess
import sys
import threading

import openai
import pytest

from .conftest import API_KEY, MODEL, start_server

HOLD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")  # the write lock, as another writer (a backup, a second server) takes it
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


class LockHolder:
    """Another process holding the store's write lock until `release`."""

    def __init__(self, path):
        self.process = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "locked"

    def release(self):
        self.process.communicate("\n", timeout=10)
        assert self.process.returncode == 0


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


def create(server, input="Name a colour.", **fields):
    return client(server).responses.create(model=MODEL, input=input, max_output_tokens=3, temperature=0,
                                           **fields)


@pytest.fixture
def store_server(tmp_path):
    servers = []

    def start(*extra):
        servers.append(start_server(tmp_path / "responses.sqlite3", *extra))
        return servers[-1]
    yield start
    for s in servers:
        if s.process.poll() is None:
            s.stop()
    for s in servers:
        assert "Traceback" not in s.log.read_text()


def test_a_locked_store_waits_then_fails_the_response_clearly_and_loses_none(store_server):
    server = store_server("--response-store-timeout", "3")
    stored = create(server)
    holder = LockHolder(server.store)
    threading.Timer(1.0, holder.release).start()  # another writer's second-long transaction
    waited = create(server)  # is waited for
    assert holder.process.returncode == 0 and client(server).responses.retrieve(waited.id).id == waited.id

    holder = LockHolder(server.store)  # held past the timeout
    try:
        with pytest.raises(openai.APIStatusError) as refused:
            create(server)
        assert refused.value.status_code == 503 and refused.value.code == "response_store_busy"
        assert "was not stored" in refused.value.message
        events = list(client(server).responses.create(model=MODEL, input="Again.", max_output_tokens=3,
                                                      stream=True))
        assert [e.type for e in events][-1] == "error" and events[-1].code == "response_store_busy"
        assert not any(e.type == "response.completed" for e in events)  # never told it completed
        assert client(server).responses.retrieve(stored.id).id == stored.id  # readers are not blocked
    finally:
        holder.release()
    later = create(server, previous_response_id=stored.id)
    assert client(server).responses.retrieve(later.id).previous_response_id == stored.id


def test_damaged_files_fail_clearly_spare_the_rest_and_are_kept(store_server, tmp_path):
    """A page of garbage: its rows' reads fail clearly, the others are served. A file that is
    no database at all: moved aside, byte for byte, and a new store begins."""
    server = store_server()
    ids = [create(server, input="Describe file %d of the project in detail. " % i * 30).id for i in range(8)]
    server.stop()  # the store closes: its WAL is in the file
    damaged = _damage_page_of(server.store, ids[3])
    restarted = store_server()
    with pytest.raises(openai.APIStatusError) as failed:
        client(restarted).responses.retrieve(ids[3])
    assert failed.value.status_code == 500 and failed.value.code == "response_store_damaged"
    readable = [i for i in ids if i not in damaged]
    assert readable and all(client(restarted).responses.retrieve(i).id == i for i in readable)
    assert create(restarted).status == "incomplete"  # the server serves on
    restarted.stop()

    with open(server.store, "r+b") as f:
        f.write(os.urandom(4096))  # the header and the schema are gone
    original = server.store.read_bytes()
    fresh = store_server()
    (aside,) = [p for p in tmp_path.iterdir() if ".damaged-" in p.name and not p.name.endswith(("-wal", "-shm"))]
    assert aside.read_bytes() == original  # kept for whoever recovers it
    assert "cannot be read" in fresh.log.read_text()
    answer = create(fresh)
    assert client(fresh).responses.retrieve(answer.id).id == answer.id


def _damage_page_of(path, response_id):
    """Overwrite with garbage the page that holds `response_id`'s row; the ids it held."""
    page_size = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(path.read_bytes())
    page = data.index(b'{"id": "%s"' % response_id.encode()) // page_size  # its row, not the key index
    start, end = page * page_size, (page + 1) * page_size
    held = {m.decode() for m in re.findall(rb'\{"id": "(resp_[0-9a-f]+)"', bytes(data[start:end]))}
    data[start + 8:end] = os.urandom(end - start - 8)  # past the page header: the cells are garbage
    path.write_bytes(bytes(data))
    return held
