import random
import time
import tracemalloc

from zllm_core.engine.detokenizer import StreamDetokenizer


def byte_tokens(ids):
    return bytes(ids)


def feed(detok, data: bytes) -> str:
    return "".join(detok.push([b]) for b in data)


def test_multibyte_characters_split_across_tokens_come_out_whole():
    d = StreamDetokenizer(byte_tokens)
    text = "héllo 世界 🙂"
    pieces = [d.push([b]) for b in text.encode()]
    assert "".join(pieces) + d.flush() == text
    assert all("\ufffd" not in p for p in pieces)


def test_stop_string_spanning_tokens_truncates_and_never_leaks():
    d = StreamDetokenizer(byte_tokens, stop=["END"])
    out = feed(d, b"abc EN")
    assert out == "abc "  # "EN" might begin the stop string: held back
    out += feed(d, b"D tail")
    assert d.stopped and out + d.flush() == "abc "


def test_held_back_prefix_is_released_when_it_cannot_match():
    d = StreamDetokenizer(byte_tokens, stop=["END"])
    assert feed(d, b"xEN") == "x"
    assert feed(d, b"o") == "ENo"


def test_flush_releases_a_trailing_partial_match_and_invalid_bytes():
    d = StreamDetokenizer(byte_tokens, stop=["END"])
    assert feed(d, b"ok E") == "ok "
    assert d.push([0xE4]) == ""
    assert d.flush() == "E\ufffd"


def test_a_stop_string_spanning_single_byte_tokens_and_a_split_character_is_found_where_it_starts():
    stop = "»終了«"  # 2 + 3 + 3 + 2 bytes: every character is split over byte tokens
    d = StreamDetokenizer(byte_tokens, stop=[stop, "never"])
    pieces = [d.push([b]) for b in f"résumé »終 then {stop} after".encode()]
    assert "".join(pieces) + d.flush() == "résumé »終 then "
    assert d.stopped == stop
    assert all("\ufffd" not in p for p in pieces)


def reference(text: str, stops: list[str]) -> tuple[str, str | None]:
    """All text joined, cut at the earliest stop string."""
    found = [(i, s) for s in stops if (i := text.find(s)) >= 0]
    if not found:
        return text, None
    i, s = min(found)
    return text[:i], s


def nests(stops: list[str]) -> bool:
    """A stop string strictly inside another completes first when tokens are small, so where the
    text stops then depends on how it was split into tokens; the reference cannot say."""
    return any(a != b and a in b[1:-1] for a in stops for b in stops)


def test_random_streams_stop_where_the_joined_text_first_holds_a_stop_string():
    rng = random.Random(20)
    alphabet = "ab E\nND»終é🙂"
    for trial in range(3000):
        stops = []
        while not stops or nests(stops):
            stops = ["".join(rng.choices(alphabet, k=rng.randint(1, 5))) for _ in range(rng.randint(1, 3))]
        reach = max(map(len, stops)) - 1
        text = "".join(rng.choices(alphabet, k=rng.randint(0, 60)))
        data = text.encode()
        d = StreamDetokenizer(byte_tokens, stop=stops)
        out, pos = "", 0
        while pos < len(data):
            size = rng.choice((1, 1, 1, 2, 3, 7))
            piece = d.push(data[pos:pos + size])
            pos += size
            assert "\ufffd" not in piece, (trial, stops, text)
            out += piece
            if d.stopped is None:  # only what could still begin a stop string is held back
                assert len(data[:pos].decode(errors="ignore")) - len(out) <= reach, (trial, stops, text)
        out += d.flush()
        assert (out, d.stopped) == reference(text, stops), (trial, stops, text)


def test_pushing_is_linear_in_the_output():
    def per_token(n: int, d: StreamDetokenizer | None = None) -> float:
        d = d or StreamDetokenizer(byte_tokens, stop=["END", "</tool_call>"])
        tokens = [[b] for b in (b"abc EN xyz </tool " * (n // 18 + 1))[:n]]
        start = time.process_time()
        for token in tokens:
            d.push(token)
        return (time.process_time() - start) / n

    small = min(per_token(20_000) for _ in range(3))
    assert per_token(200_000) < 3 * small
    # Copying the whole text per token costs only a memcpy: at 200,000 characters that is still
    # about the rest of a push, so it shows plainly only after a long output (tens of times here).
    long = StreamDetokenizer(byte_tokens, stop=["END", "</tool_call>"])
    long.push(b"x" * 4_000_000)
    assert per_token(20_000, long) < 3 * small


def test_released_text_is_not_kept():
    d = StreamDetokenizer(byte_tokens, stop=["END", "</tool_call>"])
    data = b"y" * 1_000_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert len(d.push(data)) == len(data)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 10_000
