"""The public API is a promise (semver, README): a name that disappears or changes signature
fails here, and so does one added without updating the snapshot."""
from pathlib import Path

import zllm_core
from tests.api.public_api import render

SNAPSHOT = Path(__file__).with_name("public_api.txt")


def test_the_public_api_matches_its_snapshot():
    expected, actual = SNAPSHOT.read_text().splitlines(), render()
    removed = [line for line in expected if line not in actual]
    added = [line for line in actual if line not in expected]
    assert not removed and not added, (
        f"removed or changed: {removed}\nadded: {added}\n"
        "a removal or change is a major version (README); after a deliberate change run "
        "`python -m tests.api.public_api > tests/api/public_api.txt`")


def test_help_lists_every_public_name():
    """`help(zllm_core)` opens with the package docstring, which groups the surface."""
    assert [name for name in zllm_core.__all__ if name not in zllm_core.__doc__] == []
