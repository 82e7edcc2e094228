"""The engine step: schedule -> run the model -> sample -> append.

It works on token ids only: text, stop strings and protocol events are the output
processor's, on the consumer's side.
"""
from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np
import torch

from zllm_core.cache.block_pool import BlockPool
from zllm_core.cache.kv_cache_manager import KVCacheManager
from zllm_core.cache.kv_storage import KVLayout, KVStorage
from zllm_core.cache.prefix_cache import CacheRequest, PrefixCache
from zllm_core.cache.scope import CacheHint, Scope, model_manifest, tokenizer_manifest
from zllm_core.cache.ssd_tier import SSDConfig, SSDTier
from zllm_core.cache.token_ids import TokenIds
from zllm_core.engine.device import resolve_device
from zllm_core.engine.model_runner import ModelRunner
from zllm_core.engine.ngram_drafter import NgramDrafter
from zllm_core.engine.sampler import (TokenLogprob, apply_fence_rows, apply_hooks, fence_rows, token_logprobs,
                                     verify)
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.engine.scheduler import Scheduler, SchedulerConfig
from zllm_core.engine.sequence import Sequence, Status
from zllm_core.model.backends import select_backend

# One thread for every engine in the process: a step waits for its own rows before sampling.
_FENCE_WORKER = ThreadPoolExecutor(1, thread_name_prefix="zllm-fence")


@dataclass(frozen=True)
class EngineConfig:
    model: str = "zllm-demo"
    dtype: Optional[str] = None
    device: str = "cpu"  # or "auto" (CUDA when torch sees one), "cuda", "cuda:1"
    block_size: int = 16
    kv_cache_bytes: int = 1 << 30
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: Optional[int] = None
    allow_long_context: bool = False  # let max_model_len exceed the model's trained context
    attention_backend: str = "auto"
    enable_prefix_cache: bool = True
    block_hash: str = "sha256"  # or "fast128"
    ssd_cache_dir: Optional[str] = None  # the prefix cache's SSD tier; None: off
    ssd_cache_bytes: int = 64 << 30
    speculative_tokens: int = 0  # K: prompt-lookup draft tokens verified per step; 0 = off
    max_prefill_tokens_while_decoding: Optional[int] = None  # see SchedulerConfig


def context_length(config: EngineConfig, trained: int) -> int:
    """``max_model_len``, or the trained context; past it only when the operator says so."""
    asked = config.max_model_len or trained
    if asked > trained and not config.allow_long_context:
        raise ValueError(f"--max-model-len {asked} exceeds the model's trained context of {trained} tokens; "
                         "pass --allow-long-context to serve it anyway")
    return asked


@dataclass
class SpeculationStats:
    steps: int = 0  # decode steps that verified a draft
    drafted: int = 0
    accepted: int = 0

    def record(self, drafted: int, accepted: int) -> None:
        if drafted:
            self.steps += 1
            self.drafted += drafted
            self.accepted += accepted

    def metrics(self) -> dict[str, float]:
        return {"steps": self.steps, "drafted": self.drafted, "accepted": self.accepted,
                "acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
                # tokens a drafted step emits: the accepted ones and the one drawn after them
                "tokens_per_step": (self.accepted + self.steps) / self.steps if self.steps else 0.0}


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    new_token_ids: list[int]
    finish_reason: Optional[str]  # "stop" | "length" | "abort" once finished
    error: Optional[str]  # set when the request failed (its logits hook raised)
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    logprobs: Optional[list[TokenLogprob]] = None  # one per new token, when the request asked
    stop_token: bool = False  # the last new token is a stop token (EOS): it has no text
    drafted: int = 0  # draft tokens verified for this request so far
    accepted: int = 0  # of those, how many the model accepted

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class LLMEngine:
    def __init__(self, model: torch.nn.Module, tokenizer: Any, config: EngineConfig, scope: Scope):
        self.config = config
        self.scope = scope
        self.model = model
        self.tokenizer = tokenizer
        mc = model.config
        self.device = torch.device(config.device)
        self.max_model_len = context_length(config, mc.max_position_embeddings)
        dtype = next(model.parameters()).dtype
        layout = KVLayout(mc.num_layers, mc.num_kv_heads, mc.head_dim, dtype, config.block_size)
        storage = KVStorage(layout, layout.blocks_in(config.kv_cache_bytes), self.device)
        pool = BlockPool(storage.num_blocks, config.block_size)
        cache = None
        if config.enable_prefix_cache:
            describe = tokenizer.decode if tokenizer is not None else repr
            ssd = (SSDTier(storage, SSDConfig(config.ssd_cache_dir, config.ssd_cache_bytes))
                   if config.ssd_cache_dir else None)
            cache = PrefixCache(pool, config.block_hash, describe=describe, ssd=ssd)
        self.kv = KVCacheManager(pool, cache)
        self.scheduler = Scheduler(self.kv, SchedulerConfig(config.max_num_seqs, config.max_num_batched_tokens,
                                                                config.max_prefill_tokens_while_decoding))
        backend = select_backend(self.device, config.attention_backend)
        self.runner = ModelRunner(model, storage, backend, self.device, config.max_num_seqs,
                                  self.max_model_len, config.max_num_batched_tokens)
        self.eos_token_ids = frozenset(mc.eos_token_ids)
        # Checkpoints pad the output head past the tokenizer (Qwen: 151936 rows, 151669
        # tokens); a padding id has no text, so it must never be sampled.
        self.sampleable = min(mc.vocab_size, tokenizer.vocab_size) if tokenizer is not None else mc.vocab_size
        self._seqs: dict[str, Sequence] = {}
        self.spec_stats = SpeculationStats()
        self._arrivals = itertools.count()
        self._digests: dict[str, bytes] = {}  # by tenant: the scope's JSON and SHA-256 once, not per request

    @classmethod
    def from_config(cls, config: EngineConfig) -> "LLMEngine":
        from zllm_core.model.loader import load_model, read_config
        from zllm_core.model.model_names import resolve_model
        from zllm_core.tokenizer import Tokenizer

        config = replace(config, device=resolve_device(config.device))
        model_dir = resolve_model(config.model)
        context_length(config, read_config(model_dir).max_position_embeddings)  # refused before the weights load
        model = load_model(model_dir, dtype=config.dtype, device=config.device)
        dtype = str(next(model.parameters()).dtype)
        scope = Scope(model_manifest(model_dir, dtype), tokenizer_manifest(model_dir))
        return cls(model, Tokenizer.from_pretrained(model_dir), config, scope)

    # -- requests ---------------------------------------------------------------------

    def add_request(self, request_id: str, prompt_ids: TokenIds, params: SamplingParams,
                    cache: Optional[CacheHint] = CacheHint()) -> None:
        """Queue a request; ``prompt_ids`` is an integer array (or a list). A read-only int32
        or uint32 array that views nothing writable (the tokenizer's) is held as it is, never
        copied; anything else is copied once. ``cache=None`` keeps it out of the prefix cache."""
        if request_id in self._seqs:
            raise ValueError(f"request id {request_id!r} is already in use")
        prompt_ids = np.asarray(prompt_ids)
        self._validate_prompt(prompt_ids)
        seq = Sequence(request_id, prompt_ids, params, next(self._arrivals))
        if cache is not None:
            seq.cache = self.kv.request(self._scope_digest(cache), cache.cache_id, seq.prompt)
        self._validate_ids(prompt_ids, self._checked(seq, prompt_ids))
        if params.seed is not None:
            seq.generator = torch.Generator(self.device).manual_seed(params.seed)
        if (self.config.speculative_tokens and params.speculative and params.logits_hook is None
                and params.logprobs is None):
            seq.drafter = NgramDrafter(self.config.speculative_tokens)
        self._seqs[request_id] = seq
        self.scheduler.add(seq)

    def _scope_digest(self, cache: CacheHint) -> bytes:
        digest = self._digests.get(cache.tenant)
        if digest is None:
            digest = self._digests[cache.tenant] = cache.scope(self.scope).digest()
        return digest

    def _validate_prompt(self, prompt_ids: np.ndarray) -> None:
        if prompt_ids.size == 0:
            raise ValueError("prompt must contain at least one token")
        if prompt_ids.ndim != 1 or prompt_ids.dtype.kind not in "iu":
            raise ValueError("prompt must be a flat sequence of integer token ids")
        if len(prompt_ids) >= self.max_model_len:
            raise ValueError(f"prompt has {len(prompt_ids)} tokens; the context length is "
                             f"{self.max_model_len} and at least one token must be generated")
        capacity = self.kv.capacity_tokens
        if len(prompt_ids) >= capacity:
            raise ValueError(f"prompt has {len(prompt_ids)} tokens; the KV cache holds {capacity}")

    @staticmethod
    def _checked(seq: Sequence, prompt_ids: np.ndarray) -> int:
        """Leading ids already known valid: those equal, bit for bit, to the conversation's last
        state (a validated prompt and sampled tokens). A wider dtype was narrowed before that
        compare, so its ids are all checked."""
        verified = seq.cache.verified if seq.cache is not None else None
        return verified.shared if verified is not None and prompt_ids.itemsize == 4 else 0

    def _validate_ids(self, prompt_ids: np.ndarray, start: int) -> None:
        vocab, rest = self.model.config.vocab_size, prompt_ids[start:]
        # One pass: viewed as unsigned, a negative id is larger than any vocabulary.
        if len(rest) and int(rest.view(f"u{rest.itemsize}").max()) >= vocab:
            lo, hi = int(rest.min()), int(rest.max())
            raise ValueError(f"prompt token id {lo if lo < 0 else hi} is outside the vocabulary (size {vocab})")

    def abort(self, request_id: str, reason: str = "abort") -> Optional[RequestOutput]:
        """End a request now. ``reason="stop"`` (its consumer found a stop string) keeps its
        terminal state for the conversation's next turn; an abort does not."""
        seq = self._seqs.get(request_id)
        if seq is None:
            return None
        self.scheduler.finish(seq, reason)
        return self._output(seq, [])

    def forget(self, cache: CacheHint) -> None:
        """The conversation `cache` names has been released by the server: the cache drops its
        terminal states (its blocks stay, evictable)."""
        self.kv.forget(CacheRequest(self._scope_digest(cache), cache.cache_id))

    def abort_all(self) -> list[str]:
        ids = list(self._seqs)
        for rid in ids:
            self.abort(rid)
        return ids

    def has_unfinished(self) -> bool:
        return bool(self._seqs)

    def metrics(self) -> dict[str, Any]:
        """Scheduler and cache counters; safe from another thread (see KVCacheManager.metrics)."""
        out = self.kv.metrics()
        out["blocks"]["allocated_bytes"] = self.runner.storage.allocated_bytes
        out.update(requests_running=len(self.scheduler.running), requests_waiting=len(self.scheduler.waiting),
                   num_preemptions=self.scheduler.num_preemptions, speculative=self.spec_stats.metrics())
        return out

    def close(self) -> None:
        """Graceful shutdown: the prefix cache backs its resident state up to the SSD tier."""
        self.kv.close()

    # -- the step ---------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        batch = self.scheduler.schedule()
        if batch is None:
            return []
        chunks = [c for c in batch.chunks if c.samples]
        seqs = [c.seq for c in chunks]
        drafts = [np.array(c.seq.draft[:c.draft]) for c in chunks]
        # The fences' rows for this step depend only on tokens sampled before it: a worker
        # computes them while the model runs (the native walks release the GIL).
        fences = [s.params.fence for s in seqs]
        rows = _FENCE_WORKER.submit(fence_rows, fences, drafts) if any(fences) else None
        logits = self.runner.run(batch)  # 1 + draft rows per sampling chunk
        logits[:, self.sampleable:] = float("-inf")
        first_rows = np.cumsum([0] + [1 + len(d) for d in drafts[:-1]])
        failed = apply_hooks(logits, seqs, first_rows)
        if rows is not None:
            masks, fence_failed = rows.result()
            failed.update(fence_failed)
            apply_fence_rows(logits, masks, self.sampleable)
        tokens = verify(logits, seqs, drafts)
        logprobs = token_logprobs(logits, seqs, [t[0] for t in tokens], first_rows)
        ends = [None if i in failed else self._extend(seq, tokens[i], len(drafts[i])) for i, seq in enumerate(seqs)]
        self.scheduler.update(batch)  # after the tokens are in: a draft's accepted part is computed
        return [self._fail(seq, failed[i]) if i in failed else self._finish(seq, tokens[i], ends[i], logprobs[i])
                for i, seq in enumerate(seqs)]

    def _fail(self, seq: Sequence, exc: Exception) -> RequestOutput:
        self.scheduler.finish(seq, "abort")
        return self._output(seq, [], error=f"{type(exc).__name__}: {exc}")

    def _extend(self, seq: Sequence, tokens: list[int], drafted: int) -> Optional[str]:
        """Append the step's tokens up to the first that ends the request; return why it ends.
        Cuts ``tokens`` to those appended."""
        p = seq.params
        seq.num_drafted += drafted
        seq.num_accepted += len(tokens) - 1
        self.spec_stats.record(drafted, len(tokens) - 1)
        for n, token in enumerate(tokens, 1):
            seq.append(token)
            if p.fence is not None:
                p.fence.advance(token)
            if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids):
                reason = "stop_token"
            elif self._room(seq) <= 0:
                reason = "length"
            else:
                continue
            del tokens[n:]
            return reason
        return None

    def _room(self, seq: Sequence) -> int:
        """Tokens the request may still append: within its budget, its context and the KV cache."""
        return min(seq.params.max_tokens - seq.num_output,
                   min(self.max_model_len, self.kv.capacity_tokens) - seq.num_tokens)

    def _finish(self, seq: Sequence, tokens: list[int], end: Optional[str],
                logprob: Optional[TokenLogprob]) -> RequestOutput:
        if end is not None:
            self.scheduler.finish(seq, "stop" if end == "stop_token" else end)
        elif seq.drafter is not None:  # a draft leaves room for the token drawn after it
            seq.propose(seq.drafter.propose(seq.token_ids)[:max(self._room(seq) - 1, 0)])
        return self._output(seq, tokens, logprobs=None if logprob is None else [logprob],
                            stop_token=end == "stop_token")

    def _output(self, seq: Sequence, new: list[int], error: Optional[str] = None,
                logprobs: Optional[list[TokenLogprob]] = None, stop_token: bool = False) -> RequestOutput:
        if seq.status is Status.FINISHED:
            self._seqs.pop(seq.request_id, None)
        return RequestOutput(seq.request_id, new, seq.finish_reason, error, seq.prompt_len, seq.num_cached,
                             seq.num_output, logprobs, stop_token, seq.num_drafted, seq.num_accepted)
