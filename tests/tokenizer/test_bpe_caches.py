"""The caches in front of byte-pair merging never change a result, also once they outgrow their
first size."""
from __future__ import annotations

import random
import string

from tests.tokenizer.references import hf_tokenizer
from zllm_core.tokenizer import Tokenizer


def random_words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(" " + "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 12))) for _ in range(count))


def test_grown_hot_cache_without_whole_piece_lookup_matches_hugging_face(hf_json_dir):
    """A tokenizer.json without ignore_merges merges every new piece, one-token pieces too, and
    its hot cache starts with none: 60,000 distinct words fill its first 65,536 slots past
    3/4, so it grows (every piece moves to a new slot) mid-text, and the second pass finds them
    all there."""
    path = hf_json_dir / "gpt2.json"
    ours, ref = Tokenizer.from_tokenizer_json(path), hf_tokenizer(path)
    text = random_words(60_000, seed=5)
    expected = ref.encode(text, add_special_tokens=False).ids
    assert ours.encode(text, disallowed_special=()) == expected
    assert ours.encode(text, disallowed_special=()) == expected
