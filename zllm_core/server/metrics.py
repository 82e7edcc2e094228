"""`/metrics` in Prometheus' text exposition: the engine's and tokenizer's counters, read when
scraped, and the latency histograms the server observes itself.

Counters live where they are counted (scheduler, prefix cache, tokenizer); this module only
names them. Each app has its own registry, so two servers in one process never share series.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# From a cached short prompt on a GPU (ms) to a cold 1M-token prefill on a CPU (minutes).
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class ServerMetrics:
    def __init__(self, engine_metrics: Callable[[], dict[str, Any]],
                 tokenizer_metrics: Callable[[], dict[str, float]]):
        self.registry = CollectorRegistry()
        self.ttft = Histogram("zllm_time_to_first_token_seconds", "Request arrival to first output token",
                              registry=self.registry, buckets=TTFT_BUCKETS)
        self.itl = Histogram("zllm_inter_token_latency_seconds", "Time between consecutive output events",
                             registry=self.registry, buckets=ITL_BUCKETS)
        self.duration = Histogram("zllm_request_duration_seconds", "Whole HTTP request", ["path"],
                                  registry=self.registry, buckets=DURATION_BUCKETS)
        self.registry.register(_Counters(engine_metrics, tokenizer_metrics))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Counters:
    """A custom collector: reads both metrics dicts once per scrape."""

    def __init__(self, engine: Callable[[], dict[str, Any]], tokenizer: Callable[[], dict[str, float]]):
        self.engine, self.tokenizer = engine, tokenizer

    def collect(self) -> Iterator[Metric]:
        e = self.engine()
        yield _gauge("zllm_requests_running", "Requests being scheduled", e["requests_running"])
        yield _gauge("zllm_requests_waiting", "Requests queued for admission", e["requests_waiting"])
        yield _counter("zllm_preemptions", "Requests preempted to free KV blocks", e["num_preemptions"])
        blocks = GaugeMetricFamily("zllm_kv_blocks", "KV cache blocks by state", labels=["state"])
        for state in ("total", "free", "used"):
            blocks.add_metric([state], e["blocks"][state])
        yield blocks
        yield _gauge("zllm_kv_cache_bytes", "Bytes allocated for the KV cache", e["blocks"]["allocated_bytes"])
        if e["cache"] is not None:
            yield from _prefix_cache(e["cache"])
        if e.get("ssd") is not None:
            yield from _ssd_tier(e["ssd"])
        if e.get("speculative") is not None:
            yield from _speculation(e["speculative"])
        yield from _tokenizer(self.tokenizer())


def _speculation(s: dict[str, float]) -> Iterator[Metric]:
    yield _counter("zllm_spec_draft_tokens", "Prompt-lookup draft tokens verified", s["drafted"])
    yield _counter("zllm_spec_accepted_tokens", "Draft tokens the model accepted", s["accepted"])
    yield _gauge("zllm_spec_acceptance_rate", "accepted / drafted", s["acceptance_rate"])
    yield _gauge("zllm_spec_tokens_per_step", "Tokens a drafted decode step emits (accepted + 1)",
                 s["tokens_per_step"])


def _prefix_cache(c: dict[str, Any]) -> Iterator[Metric]:
    yield _counter("zllm_prefix_cache_prompt_tokens", "Prompt tokens looked up", c["prompt_tokens"])
    yield _counter("zllm_prefix_cache_cached_tokens", "Prompt tokens served from the cache", c["cached_tokens"])
    yield _gauge("zllm_prefix_cache_token_hit_rate", "cached_tokens / prompt_tokens", c["token_hit_rate"])
    lookups = CounterMetricFamily("zllm_prefix_cache_lookups", "Lookups by how they matched", labels=["kind"])
    for kind, n in sorted(c["lookups"].items()):
        lookups.add_metric([kind], n)
    yield lookups
    yield _counter("zllm_prefix_cache_near_misses", "Lookups that diverged a few tokens before a resident prefix's end",
                   c["near_misses"])
    yield _counter("zllm_prefix_cache_evictions", "Blocks evicted from the prefix index", c["evictions"])
    yield _gauge("zllm_prefix_cache_indexed_blocks", "Blocks held by the prefix index", c["indexed_blocks"])


def _ssd_tier(s: dict[str, float]) -> Iterator[Metric]:
    yield _counter("zllm_ssd_cache_hits", "Lookups restored from the SSD tier", s["hits"])
    yield _counter("zllm_ssd_cache_restored_tokens", "Prompt tokens restored from the SSD tier", s["restored_tokens"])
    yield _counter("zllm_ssd_cache_read_bytes", "Snapshot bytes restored into the KV pool", s["bytes_read"])
    yield _counter("zllm_ssd_cache_written_bytes", "Snapshot bytes written and indexed", s["bytes_written"])
    yield _counter("zllm_ssd_cache_restore_seconds", "Time spent restoring (divide by hits for the mean)",
                   s["restore_seconds"])
    yield _counter("zllm_ssd_cache_failed_restores", "Restores abandoned (bad blob, dropped blob, no room)",
                   s["failed_restores"])
    yield _counter("zllm_ssd_cache_quarantined", "Snapshots that failed validation and were quarantined",
                   s["quarantined"])
    yield _counter("zllm_ssd_cache_write_errors", "Snapshot writes that failed", s["write_errors"])
    yield _gauge("zllm_ssd_cache_stored_blocks", "Blocks indexed on the SSD tier", s["stored_blocks"])
    yield _gauge("zllm_ssd_cache_orphans_collected", "Files a crash left (unfinished or unindexed blobs), removed at start",
                 s["orphans_collected"])


def _tokenizer(t: dict[str, float]) -> Iterator[Metric]:
    paths = CounterMetricFamily("zllm_tokenizer_calls", "Incremental tokenizer calls by path", labels=["path"])
    for path in ("cold", "unchanged", "repairs", "fallbacks", "routed_full"):
        paths.add_metric([path], t[path])
    yield paths
    yield _counter("zllm_tokenizer_shadow_checked", "Calls re-tokenized in full by the shadow verifier",
                   t["shadow_checked"])
    yield _counter("zllm_tokenizer_shadow_mismatches", "Shadow checks that found a difference", t["shadow_mismatches"])
    yield _counter("zllm_tokenizer_disagreements", "Repairs that disagreed with a full encode", t["disagreements"])
    yield _gauge("zllm_tokenizer_first_window_rate", "Repairs proven within the first window", t["first_window_rate"])
    yield _gauge("zllm_tokenizer_sessions", "Resident tokenizer sessions", t["sessions"])
    yield _gauge("zllm_tokenizer_session_bytes", "Bytes held by tokenizer sessions", t["session_bytes"])
    yield _gauge("zllm_conversations", "Conversations the server keeps state for", t["conversation_conversations"])
    yield _gauge("zllm_conversation_bytes", "Bytes of state kept for conversations (--conversation-bytes bounds it)",
                 t["conversation_bytes"])
    yield _counter("zllm_conversation_evictions", "Conversations released whole past the budget",
                   t["conversation_evictions"])


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)
