"""A few seconds of bench/soak.py against the live server, so the soak cannot rot: agent sessions
in every protocol through the official SDKs, clients leaving mid-stream and cancelling, forced
tool calls; no server error, no malformed stream, and the KV pool exactly empty afterwards."""
import asyncio

from soak import PROTOCOLS, Soak, SoakConfig, scan_log  # bench/, on sys.path from tests/conftest.py

from .conftest import API_KEY, MODEL

# Bounded by count (time only caps it: the machine may be busy); short prompts, so the seconds
# go to later calls of each session, not its first prefill.
SHORT = SoakConfig(sessions=8, duration=90.0, max_requests=40, disconnect=0.4, cancel=0.3, forced_tools=0.3,
                   max_tokens=8, system_chars=200, tools=3, message_chars=200, history_chars=1500,
                   request_timeout=120.0)


def test_a_short_soak_leaves_no_error_and_an_empty_pool(server, agent_trace):
    log_start = len(server.log.read_text())
    report = asyncio.run(Soak(server.url, [API_KEY], MODEL, agent_trace, SHORT).run())
    print(report.table())
    outcomes = report.tally.outcomes
    # Each protocol answered: a whole response, or a stream its client left after some events.
    assert set(outcomes) == set(PROTOCOLS) and all(outcomes[p]["ok"] + outcomes[p]["left"] for p in PROTOCOLS)
    assert report.tally.count("left") and report.tally.count("cancelled"), outcomes
    assert report.server_errors == report.malformed == report.tally.count("client_error") == 0, report.table()
    assert report.pool_empty, report.pool
    assert report.tally.forced_called == report.tally.forced > 0
    assert scan_log(server.log.read_text()[log_start:]) == (0, 0)
