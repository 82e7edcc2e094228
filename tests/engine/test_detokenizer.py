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
