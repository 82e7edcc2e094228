"""Full tokenization throughput: zllm_core against tiktoken, Hugging Face tokenizers and gigatoken.

Same 1M characters of Python source and of multilingual prose for every library and family.
cold: a fresh tokenizer object meets the text for the first time (no piece cache holds it);
warm: the same object encodes the same text again (an agent resending its context).
Single-thread numbers run with the process pinned to one CPU; batch numbers use all CPUs on
64 documents. Every library's ids are checked against tiktoken's in the same run.

    PYTHONPATH=$PWD python bench/tokenize_full.py [--families cl100k_base,...] [--chars 1000000]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import gigatoken  # noqa: E402
import tiktoken  # noqa: E402
import tokenizers  # noqa: E402

from tests.tokenizer import corpus, references  # noqa: E402
from zllm_core.tokenizer import Tokenizer  # noqa: E402
from zllm_core.tokenizer.vocabulary import load_family  # noqa: E402

SHARED = Path(os.environ.get("ZLLM_SHARED_DIR", REPO.parent / "shared"))
GIGA_NAMES = {"r50k_base": "r50k", "cl100k_base": "cl100k", "o200k_base": "o200k", "qwen2": "qwen2"}


def code_text(chars: int) -> str:
    parts, size = [], 0
    for doc in corpus.stdlib_sources(full=True):
        parts.append(doc)
        size += len(doc)
        if size >= chars:
            break
    return "".join(parts)[:chars]


class Library:
    """How to build a fresh tokenizer and encode one text or a batch with each library."""

    def __init__(self, family: str):
        self.family = family
        self.vocab = load_family(family, SHARED / "vocab")
        self.ranks = {t: i for i, t in enumerate(self.vocab.tokens) if t}
        spec = references.family_spec(family)
        self.spec = spec
        # Oniguruma reads cl100k's possessive `{1,3}+` as a repetition; the atomic group is the
        # same tokenization in its syntax, so Hugging Face is timed on identical output.
        pattern = spec["pat_str"].replace(r"\p{N}{1,3}+", r"(?>\p{N}{1,3})")
        pre = {"type": "Sequence", "pretokenizers": [references.split(pattern), references.byte_level()]}
        self.hf_json = json.dumps(references.tokenizer_json(self.vocab.tokens, [], pre))

    def makers(self) -> dict:
        path = str(SHARED / "vocab" / self.spec["file"])
        return {
            "zllm_core": lambda: Tokenizer(self.vocab),
            "tiktoken": lambda: tiktoken.Encoding(self.family, pat_str=self.spec["pat_str"],
                                                  mergeable_ranks=self.ranks, special_tokens={}),
            "hf_tokenizers": lambda: tokenizers.Tokenizer.from_str(self.hf_json),
            "gigatoken": lambda: gigatoken.Tokenizer.from_tiktoken(path, pretokenizer=GIGA_NAMES[self.family]),
        }


def encode(lib: str, tok, text: str) -> list[int]:
    if lib == "zllm_core":
        return tok.encode(text, disallowed_special=())
    if lib == "tiktoken":
        return tok.encode_ordinary(text)
    if lib == "hf_tokenizers":
        return tok.encode(text, add_special_tokens=False).ids
    return tok.encode(text)


def encode_batch(lib: str, tok, texts: list[str]):
    threads = os.cpu_count() or 1
    if lib == "zllm_core":
        return tok.encode_batch(texts, disallowed_special=(), num_threads=threads)
    if lib == "tiktoken":
        return tok.encode_ordinary_batch(texts, num_threads=threads)
    if lib == "hf_tokenizers":
        return tok.encode_batch(texts, add_special_tokens=False)
    return tok.encode_batch(texts, parallel=True)


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def single_thread(lib: str, make, text: str, expected: list[int], repeats: int) -> tuple[float, float, bool]:
    """(cold seconds, warm seconds, exact): best of `repeats` fresh objects, then warm runs."""
    colds, warms, exact = [], [], True
    for _ in range(repeats):
        tok = make()
        seconds, ids = timed(lambda: encode(lib, tok, text))
        colds.append(seconds)
        exact &= list(ids) == expected
        warms += [timed(lambda: encode(lib, tok, text))[0] for _ in range(repeats)]
    return min(colds), min(warms), exact


def batch(lib: str, make, docs: list[str]) -> tuple[float, float]:
    tok = make()
    cold = timed(lambda: encode_batch(lib, tok, docs))[0]
    warm = min(timed(lambda: encode_batch(lib, tok, docs))[0] for _ in range(2))
    return cold, warm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(references.FAMILIES))
    ap.add_argument("--chars", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    texts = {"code": code_text(args.chars), "prose": corpus.gettext_prose(args.chars)}
    all_cpus = os.sched_getaffinity(0)
    print(f"# {args.chars:,} characters per text; {len(all_cpus)} CPUs; MB = 10^6 UTF-8 bytes")
    print("| family | text | library | cold MB/s | warm MB/s | zllm cold / this cold | exact | batch cold MB/s | batch warm MB/s |")
    print("|---|---|---|---:|---:|---:|---|---:|---:|")
    for family in args.families.split(","):
        libs = Library(family)
        for text_name, text in texts.items():
            mb = len(text.encode()) / 1e6
            expected = encode("tiktoken", libs.makers()["tiktoken"](), text)
            docs = [text[k * len(text) // 64:(k + 1) * len(text) // 64] for k in range(64)]
            rows = {}
            for lib, make in libs.makers().items():
                os.sched_setaffinity(0, {min(all_cpus)})
                cold, warm, exact = single_thread(lib, make, text, expected, args.repeats)
                os.sched_setaffinity(0, all_cpus)
                bcold, bwarm = batch(lib, make, docs)
                rows[lib] = (mb / cold, mb / warm, exact, mb / bcold, mb / bwarm)
            ours = rows["zllm_core"][0]
            for lib, (cold, warm, exact, bcold, bwarm) in rows.items():
                print(f"| {family} | {text_name} | {lib} | {cold:.1f} | {warm:.1f} | {ours / cold:.2f}x | "
                      f"{'yes' if exact else 'NO'} | {bcold:.1f} | {bwarm:.1f} |", flush=True)


if __name__ == "__main__":
    main()
