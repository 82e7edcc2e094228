"""Full tokenization throughput: zllm_core against tiktoken, Hugging Face tokenizers and gigatoken.

Same 1M characters of each text for every library and family: Python source (code), gettext
catalogues (prose) and the generated multilingual corpus (bench/multilingual.py: many scripts,
prose mixed with code).
cold: a fresh tokenizer object meets the text for the first time (no piece cache holds it);
warm: the same object encodes the same text again (an agent resending its context).
Single-thread numbers run with the process pinned to one CPU and are given as CPU time (the
process's, so a library's helper threads count) and wall time: on a shared, oversubscribed
host CPU time is the stable one, and ratios use it. Batch numbers use all CPUs on 64
documents, wall time. Every library's ids are checked against tiktoken's in the same run.
Output types differ: tiktoken and Hugging Face return Python lists, gigatoken a numpy array.
zllm_core is timed both ways (`encode`, a list; `encode_to_numpy`, an array) and each ratio
compares like with like: gigatoken against the array row, the others against the list row.
A second table pairs zllm_core[numpy] with gigatoken and with tiktoken, cold and warm, round
by round, and gives the median ratio with a 95% interval: best-of-N numbers taken minutes
apart on a shared host move by several percent, more than the margin between the two.
--instructions prints instead instructions per MB of one cold and one warm encode of each text
by zllm_core[numpy] and gigatoken, counted by valgrind's callgrind (repeatable on a loaded
host, where times are not; `perf stat` counts no instructions on this VM): processes that
encode the text 0 (one per family and library), 1 and 2 times after the same set-up,
differenced. Minutes per row.

    PYTHONPATH=$PWD python bench/tokenize_full.py [--families cl100k_base,...] [--chars 1000000]
        [--texts code,prose,multilingual] [--libraries ...] [--repeats 2] [--paired-rounds 15]
        [--instructions]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from functools import cached_property
from math import comb
from pathlib import Path

# numpy's OpenBLAS starts a thread per CPU that spins for a while; no library here uses BLAS,
# and its spinning would count, at random, in whichever library's process CPU time it overlaps.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import gigatoken  # noqa: E402
import tiktoken  # noqa: E402
import tokenizers  # noqa: E402
from multilingual import multilingual_text  # noqa: E402

from tests.tokenizer import corpus, references  # noqa: E402
from zllm_core.tokenizer import Tokenizer  # noqa: E402
from zllm_core.tokenizer.tokenizer import DEVICE_FLOOR_CHARS  # noqa: E402
from zllm_core.tokenizer.vocabulary import PACKAGE_VOCAB, load_family  # noqa: E402

PAIRED_PEERS = ("gigatoken", "tiktoken")
COUNTED = ("zllm_core[numpy]", "gigatoken")
# A fresh object's first encode, untimed: long enough that zllm_core looks for its GPU path
# (once per object, and 70 ms of CUDA start-up on the process's first), few distinct pieces.
WARM_UP = "x = 1\n" * (DEVICE_FLOOR_CHARS // 6 + 1)
GIGA_NAMES = {"r50k_base": "r50k", "cl100k_base": "cl100k", "o200k_base": "o200k", "qwen2": "qwen2"}


def code_text(chars: int) -> str:
    return "".join(corpus.stdlib_sources(full=True, limit_chars=chars))[:chars]


class Library:
    """How to build a fresh tokenizer and encode one text or a batch with each library."""

    def __init__(self, family: str):
        self.family = family
        self.vocab = load_family(family)
        self.spec = references.family_spec(family)

    @cached_property
    def ranks(self) -> dict[bytes, int]:
        return {t: i for i, t in enumerate(self.vocab.tokens) if t}

    @cached_property
    def hf_json(self) -> str:
        # Oniguruma reads cl100k's possessive `{1,3}+` as a repetition; the atomic group is the
        # same tokenization in its syntax, so Hugging Face is timed on identical output.
        pattern = self.spec["pat_str"].replace(r"\p{N}{1,3}+", r"(?>\p{N}{1,3})")
        pre = {"type": "Sequence", "pretokenizers": [references.split(pattern), references.byte_level()]}
        return json.dumps(references.tokenizer_json(self.vocab.tokens, [], pre))

    def makers(self) -> dict:
        path = str(PACKAGE_VOCAB / self.spec["file"])
        return {
            "zllm_core": lambda: Tokenizer(self.vocab),
            "zllm_core[numpy]": lambda: Tokenizer(self.vocab),
            "tiktoken": lambda: tiktoken.Encoding(self.family, pat_str=self.spec["pat_str"],
                                                  mergeable_ranks=self.ranks, special_tokens={}),
            "hf_tokenizers": lambda: tokenizers.Tokenizer.from_str(self.hf_json),
            "gigatoken": lambda: gigatoken.Tokenizer.from_tiktoken(path, pretokenizer=GIGA_NAMES[self.family]),
        }


def encode(lib: str, tok, text: str) -> list[int]:
    if lib == "zllm_core":
        return tok.encode(text, disallowed_special=())
    if lib == "zllm_core[numpy]":
        return tok.encode_to_numpy(text, disallowed_special=())
    if lib == "tiktoken":
        return tok.encode_ordinary(text)
    if lib == "hf_tokenizers":
        return tok.encode(text, add_special_tokens=False).ids
    return tok.encode(text)


def encode_batch(lib: str, tok, texts: list[str]):
    threads = os.cpu_count() or 1
    if lib.startswith("zllm_core"):  # batches are lists either way
        return tok.encode_batch(texts, disallowed_special=(), num_threads=threads)
    if lib == "tiktoken":
        return tok.encode_ordinary_batch(texts, num_threads=threads)
    if lib == "hf_tokenizers":
        return tok.encode_batch(texts, add_special_tokens=False)
    return tok.encode_batch(texts, parallel=True)


def timed(fn, clock=time.perf_counter) -> tuple[float, object]:
    start = clock()
    out = fn()
    return clock() - start, out


def cpu_and_wall(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.process_time() - cpu, time.perf_counter() - wall, out


def fresh_cold(lib: str, make, text: str) -> tuple[object, float, float, object]:
    """(a fresh object, cpu s, wall s, ids) of its first encode of `text`, cold. The object
    first encodes WARM_UP, so one-time lazy setup is not timed."""
    tok = make()
    encode(lib, tok, WARM_UP)
    cpu, wall, ids = cpu_and_wall(lambda: encode(lib, tok, text))
    return tok, cpu, wall, ids


def single_thread(makers: dict, text: str, expected: list[int], repeats: int) -> dict:
    """Per library: best (cpu, wall) seconds cold over `repeats` fresh objects, then warm, and
    exactness. The libraries take turns within each round, so a change in the shared host's
    load hits them alike instead of whichever ran then."""
    colds = {lib: [] for lib in makers}
    warms = {lib: [] for lib in makers}
    exact = {lib: True for lib in makers}
    for _ in range(repeats):
        for lib, make in makers.items():
            tok, cpu, wall, ids = fresh_cold(lib, make, text)
            colds[lib].append((cpu, wall))
            exact[lib] &= list(ids) == expected
            warms[lib] += [cpu_and_wall(lambda: encode(lib, tok, text))[:2] for _ in range(repeats)]
            del tok, ids
    best = lambda runs: [min(r[0] for r in runs), min(r[1] for r in runs)]  # noqa: E731
    return {lib: (best(colds[lib]), best(warms[lib]), exact[lib]) for lib in makers}


def paired_ratios(makers: dict, text: str, rounds: int, peer: str, warm: bool,
                  ours: str = "zllm_core[numpy]") -> list[float]:
    """Per round, fresh objects of `ours` and `peer` (turns alternating) each encode `text`,
    cold (the object's first encode) or warm (its second): the ratio of their CPU times (>1:
    ours faster). A ratio from one round compares two encodes a moment apart, so the host's
    drift, which moves best-of-N numbers taken minutes apart by several percent, mostly
    cancels."""
    def seconds(lib: str) -> float:
        tok, cpu, _, _ = fresh_cold(lib, makers[lib], text)
        return cpu_and_wall(lambda: encode(lib, tok, text))[0] if warm else cpu

    ratios = []
    for r in range(rounds):
        order = (ours, peer) if r % 2 == 0 else (peer, ours)
        times = {lib: seconds(lib) for lib in order}
        ratios.append(times[peer] / times[ours])
    return ratios


def median_interval(xs: list[float], level: float = 0.95) -> tuple[float, float, float, float]:
    """(median, low, high, coverage): a distribution-free interval for the median, the pair
    of order statistics [x_(k), x_(n+1-k)] with the largest k whose coverage, from the
    binomial(n, 1/2) count of values below the median, is still `level` (from 6 values on)."""
    xs, n = sorted(xs), len(xs)
    below = lambda k: sum(comb(n, j) for j in range(k)) / 2**n  # noqa: E731  P(count < k)
    k = 1
    while k < n // 2 and below(k + 1) <= (1 - level) / 2:
        k += 1
    return statistics.median(xs), xs[k - 1], xs[n - k], 1 - 2 * below(k)


def encode_times(lib: str, family: str, folder: str, name: str, times: int) -> None:
    """The process callgrind counts: a fresh tokenizer, its warm-up encode, every text of
    the folder read (so that processes differ only in their encodes), then one of them encoded
    `times` times."""
    tok = Library(family).makers()[lib]()
    encode(lib, tok, WARM_UP)
    texts = {path.stem: path.read_text() for path in sorted(Path(folder).glob("*.txt"))}
    for _ in range(times):
        encode(lib, tok, texts[name])


def callgrind_count(lib: str, family: str, folder: str, name: str, times: int) -> int:
    """Instructions of a process that encodes the text `times` times after the same set-up. A
    fixed string hash seed makes the set-ups identical (with a random one, building the same
    dicts took millions of instructions more or less)."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
         "--encode-times", lib, family, folder, name, str(times)],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"}).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def instruction_table(families: list[str], texts: dict[str, str]) -> None:
    """Per family, text and library: the instructions of one cold and one warm encode, from
    processes encoding the text 0 (once per family), 1 and 2 times, differenced."""
    print("\n# instructions per MB of one encode (callgrind): zllm_core[numpy] and gigatoken, cold (a fresh "
          "object's first encode of the text) and warm (its second); ratio = gigatoken / zllm_core")
    print("| family | text | zllm cold M/MB | gigatoken cold M/MB | ratio | zllm warm M/MB | gigatoken warm M/MB | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in texts.items():
            (Path(tmp) / f"{name}.txt").write_text(text)
        for family in families:
            base = {lib: callgrind_count(lib, family, tmp, "", 0) for lib in COUNTED}
            for name, text in texts.items():
                mb = len(text.encode()) / 1e6
                cold, warm = {}, {}
                for lib in COUNTED:
                    once, twice = (callgrind_count(lib, family, tmp, name, times) for times in (1, 2))
                    cold[lib], warm[lib] = (once - base[lib]) / mb / 1e6, (twice - once) / mb / 1e6
                z, g = COUNTED
                print(f"| {family} | {name} | {cold[z]:.1f} | {cold[g]:.1f} | {cold[g] / cold[z]:.2f} | "
                      f"{warm[z]:.1f} | {warm[g]:.1f} | {warm[g] / warm[z]:.2f} |", flush=True)


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
    ap.add_argument("--paired-rounds", type=int, default=15)
    ap.add_argument("--texts", default="code,prose,multilingual")
    ap.add_argument("--libraries", default="zllm_core,zllm_core[numpy],tiktoken,hf_tokenizers,gigatoken",
                    help="the first table's; the paired table always has zllm_core[numpy], gigatoken, tiktoken")
    ap.add_argument("--instructions", action="store_true", help="count instructions per encode (callgrind) instead")
    ap.add_argument("--encode-times", nargs=5, metavar=("LIB", "FAMILY", "FOLDER", "TEXT", "TIMES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.encode_times:
        lib, family, folder, name, times = args.encode_times
        return encode_times(lib, family, folder, name, int(times))
    sources = {"code": code_text, "prose": corpus.gettext_prose, "multilingual": multilingual_text}
    texts = {name: sources[name](args.chars) for name in args.texts.split(",")}
    if args.instructions:
        return instruction_table(args.families.split(","), texts)
    all_cpus = os.sched_getaffinity(0)
    print(f"# {args.chars:,} characters per text; {len(all_cpus)} CPUs; MB = 10^6 UTF-8 bytes")
    print("| family | text | library | cold MB/s cpu (wall) | warm MB/s cpu (wall) | zllm cold / this | "
          "zllm warm / this | exact | batch cold MB/s | batch warm MB/s |")
    print("|---|---|---|---:|---:|---:|---:|---|---:|---:|")
    paired = {}
    for family in args.families.split(","):
        libs = Library(family)
        for text_name, text in texts.items():
            mb = len(text.encode()) / 1e6
            expected = encode("tiktoken", libs.makers()["tiktoken"](), text)
            docs = [text[k * len(text) // 64:(k + 1) * len(text) // 64] for k in range(64)]
            makers = libs.makers()
            table = {lib: makers[lib] for lib in args.libraries.split(",")}
            os.sched_setaffinity(0, {min(all_cpus)})
            singles = single_thread(table, text, expected, args.repeats)
            paired[(family, text_name)] = [paired_ratios(makers, text, args.paired_rounds, peer, warm)
                                           for peer in PAIRED_PEERS for warm in (False, True)]
            os.sched_setaffinity(0, all_cpus)
            rows = {}
            for lib, make in table.items():
                cold, warm, exact = singles[lib]
                bcold, bwarm = batch(lib, make, docs)
                rows[lib] = ([mb / s for s in cold], [mb / s for s in warm], exact, mb / bcold, mb / bwarm)
            for lib, (cold, warm, exact, bcold, bwarm) in rows.items():
                ours = rows.get("zllm_core[numpy]" if lib in ("gigatoken", "zllm_core[numpy]") else "zllm_core", rows[lib])
                ours_cold, ours_warm = ours[0][0], ours[1][0]
                print(f"| {family} | {text_name} | {lib} | {cold[0]:.1f} ({cold[1]:.1f}) | {warm[0]:.1f} ({warm[1]:.1f}) | "
                      f"{ours_cold / cold[0]:.2f}x | {ours_warm / warm[0]:.2f}x | {'yes' if exact else 'NO'} | "
                      f"{bcold:.1f} | {bwarm:.1f} |", flush=True)
    print(f"\n# paired: {args.paired_rounds} rounds, each a fresh zllm_core[numpy] and a fresh peer encoding the "
          "text once (cold) or twice, the second timed (warm), one CPU; their CPU-time ratio per round "
          "(>1: zllm_core faster): median [95% interval] (lowest round)")
    heads = [f"{peer} {kind}" for peer in PAIRED_PEERS for kind in ("cold", "warm")]
    print("| family | text | " + " | ".join(heads) + " |")
    print("|---|---|" + "---:|" * len(heads))
    for (family, text_name), series in paired.items():
        cells = []
        for ratios in series:
            median, low, high, _ = median_interval(ratios)
            cells.append(f"{median:.2f} [{low:.2f}, {high:.2f}] ({min(ratios):.2f})")
        print(f"| {family} | {text_name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
