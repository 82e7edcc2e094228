"""schemathesis over every operation of /openapi.json, against a live `zllm serve`.

Its examples, coverage and fuzzing phases send valid and invalid bodies (and no key, wrong
methods, odd content types) to Chat, Responses, Messages, count_tokens, the stored responses
and the model list. Every check must pass: no 5xx, every status and content type documented,
every error body in its protocol's documented shape, invalid data refused, and (our own check,
tests/server/schema_checks.py) every 400 naming its field. A bounded profile: a fixed seed, a
few examples an operation, one output token a generation.
"""
import os
import subprocess
import sys

import httpx
import pytest

from .conftest import API_KEY, REPO, start_server

MAX_EXAMPLES = "12"
MAX_SECONDS = "30"


@pytest.fixture(scope="module")
def terse_server(tmp_path_factory):
    """A server whose generations are one token long: the fuzzer's valid bodies cost a prefill."""
    live = start_server(tmp_path_factory.mktemp("schema") / "responses.sqlite3", "--max-output-tokens", "1")
    yield live
    live.stop()


def test_the_document_describes_every_protocol_body(terse_server):
    doc = httpx.get(terse_server.url + "/openapi.json", timeout=10).json()  # no key needed
    bodies = {path: op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
              for path, ops in doc["paths"].items() for op in ops.values() if "requestBody" in op}
    assert bodies == {"/v1/chat/completions": "ChatRequest", "/v1/responses": "ResponsesRequest",
                      "/v1/messages": "MessagesRequest", "/v1/messages/count_tokens": "CountTokensRequest"}
    assert "/v1/models" in doc["paths"] and "HTTPValidationError" not in doc["components"]["schemas"]
    messages = doc["paths"]["/v1/messages"]["post"]["responses"]
    assert messages["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/AnthropicError")


def test_schemathesis_finds_no_failure(terse_server, tmp_path):
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.server.schema_checks",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", terse_server.url + "/openapi.json",
         "--header", f"Authorization: Bearer {API_KEY}", "--checks", "all",
         # A body valid by the schema can still be refused by a rule no schema states (a tool
         # result without its call): refusals are checked, acceptance is not promised.
         "--exclude-checks", "positive_data_acceptance",
         "--phases", "examples,coverage,fuzzing", "--max-examples", MAX_EXAMPLES, "--max-time", MAX_SECONDS,
         "--seed", "28", "--generation-deterministic",
         # One worker: hypothesis reads lambda sources with `ast`, which is not thread-safe here.
         "--request-timeout", "30", "--workers", "1", "--no-color"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert "Traceback" not in terse_server.log.read_text()
