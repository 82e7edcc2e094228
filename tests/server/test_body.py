"""Request bodies parse with orjson and mean exactly what the standard parser made of them."""
import json

import pytest

from zllm_core.server.body import loads

# What orjson refuses and the standard parser takes, then what both take.
BODIES = [b'{"content": "\\ud83d"}', b'{"temperature": NaN}', '{"content": "h\u00e9"}'.encode("utf-16"),
          b'{"messages": [{"role": "user", "content": "hi \\u00e9"}], "max_tokens": 8}']


@pytest.mark.parametrize("body", BODIES)
def test_a_body_means_what_the_standard_parser_made_of_it(body):
    assert repr(loads(body)) == repr(json.loads(body))


@pytest.mark.parametrize("body", [b'{"messages": [', b"", b'{"a": 1,}'])
def test_a_malformed_body_raises_the_standard_parsers_error(body):
    with pytest.raises(Exception) as ours:
        loads(body)
    with pytest.raises(Exception) as theirs:
        json.loads(body)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("body", [b"\xff\xfe{", b"\x81", b'{"a": "\xc3"}'])
def test_bytes_in_no_unicode_encoding_are_malformed_json(body):
    """Not the standard parser's UnicodeDecodeError, which FastAPI would answer with a generic
    400 naming nothing: the protocol's invalid_json error, as for any other bad body."""
    with pytest.raises(json.JSONDecodeError, match="not UTF-8"):
        loads(body)
