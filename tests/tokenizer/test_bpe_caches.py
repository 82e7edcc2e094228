"""The caches in front of byte-pair merging never change a result: a merged piece the hot cache
evicts moves to the piece cache and comes back from there exactly."""
from __future__ import annotations

import random
import string

from tests.tokenizer.references import hf_tokenizer
from zllm_core.tokenizer import Tokenizer


def random_words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(" " + "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 12))) for _ in range(count))


def test_evicted_merges_without_whole_piece_lookup_match_hugging_face(hf_json_dir):
    """A tokenizer.json without ignore_merges merges every new piece, one-token pieces too, so
    each is only in the hot cache until evicted: 40,000 distinct words in its 65,536 direct-mapped
    slots collide thousands of times, and the second pass finds the evicted ones in the piece
    cache."""
    path = hf_json_dir / "gpt2.json"
    ours, ref = Tokenizer.from_tokenizer_json(path), hf_tokenizer(path)
    text = random_words(40_000, seed=5)
    expected = ref.encode(text, add_special_tokens=False).ids
    assert ours.encode(text, disallowed_special=()) == expected
    assert ours.encode(text, disallowed_special=()) == expected
