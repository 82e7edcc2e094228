"""The GPU tokenizer's kernels against the CPU tokenizer: token ids, piece boundaries and the code
point offset where each token ends, identical on the project's corpora, for every family and the
Hugging Face shapes, and on adversarial texts.

CI runs the kernels' own source on this CPU (tests/kernels/gpu_tokenize_emulated.py: the CUDA
source over fiber SIMT stand-ins); where a CUDA device is present the same tests also run the
compiled kernels (bench/gpu_check.sh). Every text of a test goes in one batch, one run, as the
batch API sends them.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kernels.gpu_tokenize_emulated import EmulatedBackend, library
from tests.tokenizer.conftest import report
from tests.tokenizer.strategies import ascii_text, mixed_text
from zllm_core import _native
from zllm_core.tokenizer import Tokenizer
from zllm_core.tokenizer.gpu_tokenizer import (CudaBackend, DeviceUnsupported, GpuTokenizer, cuda_available,
                                               device_support)
from zllm_core.tokenizer.rules import R50K
from zllm_core.tokenizer.tokenizer import repair_surrogates
from zllm_core.tokenizer.vocabulary import Vocabulary

# Adversarial texts: each names what it stresses. Runs of 10K bytes make single pieces that only
# the block bucket (and its global-memory merge rounds) takes.
ADVERSARIAL = {
    "spaces": " " * 10_000, "tabs_then_word": "\t" * 5000 + "x", "newlines": "\n" * 10_000,
    "space_newline": " \n" * 3000 + "y", "crlf": "\r\n" * 4000, "lone_cr": "\r" * 3000 + "z",
    "crlf_mix": "a\r\nb\r\rc\n\r" * 800 + " \r\n  " * 500 + ".\r\n\r\n" * 300 + "x \r\n \r\n y",
    "unicode_spaces": "\u3000" * 3000 + "x" + "\xa0" * 3000 + "\u2028\u2029\x85\x0b\x0c" * 200,
    "indent_to_end": "x\n" + "    " * 2500, "indent_then_word": "    " * 2500 + "word",
    "digits": "1234567890" * 1000, "arabic_digits": "١٢٣٤٥٦٧٨٩٠" * 500, "fullwidth_digits": "１２３" * 1000,
    "mixed_digits": "1１2２3٣" * 800 + " 123456789012" * 100 + "x1y22z333w4444", "superscripts": "²³" * 1000,
    "one_letter": "a" * 10_000, "letters": "abcdefghij" * 1000, "cjk": "中" * 3400, "equals": "=" * 10_000,
    "dashes": "-" * 10_000 + "\n", "titlecase": "ǅ" * 5000, "marks": "x" + "\u0301" * 5000,
    "emoji": "😀" * 2500 + "👨‍👩‍👧‍👦" * 300, "slashes": "/" * 10_000, "dot_newline_slash": ".\n/\n" * 2500,
    "camel": "aB" * 5000, "contraction_chain": "a's" * 3000, "contractions": "'s" * 2000 + "'LL've'Re" * 500,
    "surrogates": "abc\ud800def\udfff \ud83d\ude00 end", "replacement": "\ufffd" * 100 + "x",
    "controls": "\x00\x01\x1f\x7f" * 500,
}


@pytest.fixture(scope="session")
def emulated_library():
    return library()


@pytest.fixture(scope="session", params=["emulated", "cuda"])
def backend(request):
    """How GpuTokenizer runs its kernels: on this CPU, or on a CUDA device where present."""
    if request.param == "cuda":
        if not cuda_available():
            pytest.skip("no CUDA device (the emulated kernels run instead)")
        return CudaBackend
    lib = request.getfixturevalue("emulated_library")
    return lambda tables: EmulatedBackend(tables, lib=lib)


@pytest.fixture(scope="session")
def gpu_tokenizers(family_tokenizers, backend) -> dict[str, GpuTokenizer]:
    return {name: GpuTokenizer(tok, backend) for name, tok in family_tokenizers.items()}


def assert_batch_matches(gpu: GpuTokenizer, texts: list[str], allowed=frozenset()) -> int:
    """One device run over `texts` against the CPU path, text by text: ids, token end offsets
    and (texts without specials) pieces. Returns the tokens compared."""
    tok = gpu.tokenizer
    policy = tok.special_policy(allowed)
    batch = gpu.run(texts, policy, ends=True, pieces=not allowed)
    assert batch is not None, "the device refused or voided the run"
    piece_ends, at, char_base = [], 0, 0
    for k, text in enumerate(texts):
        normal = repair_surrogates(tok.normalize(text))
        ids = batch.text_ids(k)
        assert ids.tolist() == tok.encode(text, allowed_special=allowed), f"ids differ for text {k}: {text[:80]!r}"
        cpu_run = _native.encode_tail(tok.native, policy, normal)
        ends = batch.ends[batch.doc_tokens[k]:batch.doc_tokens[k + 1]] - char_base
        assert np.array_equal(ends, cpu_run.ends), f"token end offsets differ for text {k}"
        if not allowed:
            piece_ends += (np.cumsum([len(p.encode()) for p in tok.pieces(normal)], dtype=np.int64) + at).tolist()
        at += len(normal.encode())
        char_base += len(normal)
    if not allowed:
        assert batch.piece_ends.tolist() == piece_ends, "piece boundaries differ"
    return len(batch.ids)


def corpus_sample(documents: dict[str, list[str]]) -> list[str]:
    """About 330K characters of each corpus kind: code, an agent session, prose, many scripts."""
    def upto(docs: list[str], chars: int) -> list[str]:
        out, size = [], 0
        for d in docs:
            out.append(d[:chars - size])
            size += len(out[-1])
            if size >= chars:
                break
        return out
    return (upto(documents["stdlib"], 130_000) + upto(documents["trace"], 60_000)
            + upto(documents["prose"], 50_000) + upto(documents["multilingual"], 90_000))


@pytest.mark.parametrize("family", ["r50k_base", "cl100k_base", "o200k_base", "qwen2"])
def test_corpora_match_cpu(gpu_tokenizers, documents, family, capsys):
    texts = corpus_sample(documents)
    tokens = assert_batch_matches(gpu_tokenizers[family], texts)
    report(capsys, f"{family}: {len(texts)} texts, {sum(map(len, texts)):,} chars, {tokens:,} tokens: "
                   "ids, pieces and token ends identical")


@pytest.mark.parametrize("family", ["r50k_base", "cl100k_base", "o200k_base", "qwen2"])
def test_adversarial_texts_match_cpu(gpu_tokenizers, family):
    assert_batch_matches(gpu_tokenizers[family], list(ADVERSARIAL.values()))


@pytest.mark.parametrize("shape", ["llama3", "qwen2", "smollm", "multi_split"])
def test_hugging_face_shapes_match_cpu(hf_json_dir, documents, backend, shape):
    """Explicit merge lists with ignore_merges (llama3) and NFC (qwen2), and Sequences of two
    and three steps, each refining the last one's pieces (Digits then GPT-2's regex; digit
    groups then Llama 3's). The other shapes repeat a family's rules."""
    gpu = GpuTokenizer(Tokenizer.from_tokenizer_json(hf_json_dir / f"{shape}.json"), backend)
    assert_batch_matches(gpu, corpus_sample(documents)[::3] + list(ADVERSARIAL.values()))


@pytest.mark.parametrize("family", ["cl100k_base", "o200k_base"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.one_of(mixed_text, ascii_text), min_size=1, max_size=40))
def test_generated_texts_match_cpu(gpu_tokenizers, family, texts):
    assert_batch_matches(gpu_tokenizers[family], texts)


def test_special_tokens(family_tokenizers, backend):
    """Allowed specials become their ids (at a text's start, end, side by side); a disallowed
    one sends the text to the CPU path, which raises as tiktoken does."""
    gpu = GpuTokenizer(family_tokenizers["qwen2"], backend)
    specials = list(gpu.tokenizer.special_tokens)[:3]
    texts = [specials[0] + "hello" + specials[1], "x" + specials[0] + specials[2] + " y " * 50, specials[1],
             "", "no specials at all", specials[0][:-1] + " almost"]
    assert_batch_matches(gpu, texts, allowed="all")
    policy = gpu.tokenizer.special_policy(frozenset())
    assert gpu.run(texts, policy) is None
    with pytest.raises(ValueError, match="disallowed special token"):
        gpu.tokenizer.encode(texts[0])


def test_batch_of_many_texts(gpu_tokenizers):
    texts = ["", "a", " ", "\n"] + [f"line {k}: {'x' * (k % 50)} {k * 7919}\n" for k in range(300)] + [""]
    gpu = gpu_tokenizers["cl100k_base"]
    out = gpu.encode_batch(texts, gpu.tokenizer.special_policy(frozenset()))
    assert [ids.tolist() for ids in out] == [gpu.tokenizer.encode(t) for t in texts]


def test_emulated_grid_size_does_not_matter(family_tokenizers, emulated_library):
    """The kernels loop over device-resident counts, so any grid covers the text."""
    tok = family_tokenizers["o200k_base"]
    text = "".join(ADVERSARIAL[k] for k in ("crlf_mix", "mixed_digits", "camel")) + " word" * 2000
    policy = tok.special_policy(frozenset())
    runs = [GpuTokenizer(tok, lambda t, b=blocks: EmulatedBackend(t, b, emulated_library)).run([text], policy)
            for blocks in (1, 3)]
    assert np.array_equal(runs[0].ids, runs[1].ids) and runs[0].ids.tolist() == tok.encode(text)


@pytest.mark.parametrize("data", [b"\x80\x80abc", b"abc\xe2\x82", b"\xff\xfe x \xc3", b"\xf0\x9f\x98", b"a\xed\xa0\x80b"],
                         ids=["orphan_continuations", "truncated_end", "invalid_leads", "cut_emoji", "encoded_surrogate"])
def test_invalid_utf8_bytes_stay_lossless(family_tokenizers, emulated_library, data):
    """No str holds invalid UTF-8, but the kernels never read past the text for it either, and
    byte-level BPE keeps every byte: the pieces tile the input and the ids decode back to it."""
    tok = family_tokenizers["cl100k_base"]
    out = EmulatedBackend(GpuTokenizer(tok, lambda t: None).tables, lib=emulated_library).run_bytes(data * 50)
    assert out["piece_ends"][-1] == len(data) * 50 and np.all(np.diff(out["piece_ends"]) > 0)
    assert tok.decode_bytes(out["ids"].tolist()) == data * 50


def test_rules_the_device_does_not_know_stay_on_cpu(family_tokenizers):
    tok = family_tokenizers["r50k_base"]
    odd = Tokenizer(Vocabulary("odd", [tok.token_bytes(i) for i in range(256)], [], True,
                               (replace(R50K, letters=7),), {}))
    assert "letters kind 7" in device_support(odd)
    with pytest.raises(DeviceUnsupported, match="letters kind 7"):
        GpuTokenizer(odd, lambda t: None)


def test_bench_runs_emulated(emulated_library, capsys):
    """bench/tokenize_gpu.py --emulated prints the table a GPU run prints, at small sizes."""
    import tokenize_gpu  # bench/, on the path by tests/conftest.py

    out = tokenize_gpu.main(["--emulated", "--sizes", "1500,4000", "--rounds", "3", "--batch", "3x1000"])
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and not line.startswith("| text")]
    assert [r[1] for r in rows] == ["gpu", "cpu", "tiktoken"] * 3
    assert [r[0].strip("| ") for r in rows[::3]] == ["1,500 chars", "4,000 chars", "batch 3x1,000"]
    assert all(float(r[2]) > 0 and float(r[4]) > 0 for r in rows)
