"""SessionText (csrc/session_text.cpp) holds a session's text in chunks of the narrowest width:
it must compare and rebuild exactly like the str it stands for, whatever the widths involved."""
from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from zllm_core import _native

CHUNK = 256
# one alphabet per storage width, so chunks of every width and every pairing occur
ALPHABETS = ["ab\n", "aé\xff", "aΩ─\u0100", "a😀\U0010ffff", "a\u0080"]
# A long compare leaves its head to the helper thread only where there is one.
HELPER = len(os.sched_getaffinity(0)) > 1 and os.environ.get("ZLLM_SCAN_THREADS") != "1"


def common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@st.composite
def texts(draw) -> str:
    """Runs of one alphabet each, long enough to fill whole chunks of one width."""
    runs = draw(st.lists(st.tuples(st.sampled_from(ALPHABETS), st.integers(0, 2 * CHUNK + 3)), max_size=6))
    rnd = draw(st.randoms(use_true_random=False))
    return "".join("".join(rnd.choice(alphabet) for _ in range(n)) for alphabet, n in runs)


@settings(max_examples=300, deadline=None)
@given(texts(), texts(), st.data())
def test_common_prefix_and_replace_agree_with_str(a, b, data):
    cut = data.draw(st.integers(0, len(a)))
    b = a[:cut] + b  # shares at least `cut` characters with a, often across chunk edges
    text = _native.SessionText(a)
    assert len(text) == len(a) and str(text) == a
    assert text.common_prefix(b) == common_prefix(a, b)
    text.replace_from(b, text.common_prefix(b))
    assert len(text) == len(b) and str(text) == b
    assert text.common_prefix(b) == len(b)
    assert text.common_prefix(b + "x") == len(b) and text.common_prefix(b[:-1]) == max(0, len(b) - 1)


def test_a_wide_character_costs_only_its_chunk():
    text = "x" * 100_000 + "😀" + "y" * 100_000
    compact = _native.SessionText(text)
    assert str(compact) == text
    # A str of this text takes 4 bytes a character; the session text 1, and an eighth more
    # kept free for appends.
    assert compact.nbytes < 1.2 * len(text)
    assert compact.common_prefix(text.replace("😀", "😁")) == 100_000
    assert compact.common_prefix(text.encode("ascii", "replace").decode()) == 100_000


def test_a_copy_is_independent():
    text = _native.SessionText("abc" * 200)
    copy = text.copy()
    text.replace_from("abc" * 100 + "zz", 300)
    assert str(copy) == "abc" * 200 and str(text) == "abc" * 100 + "zz"


def test_copy_on_write_copies_once_at_the_capacity_a_change_in_place_has():
    """A text a copy (or a scan the helper still holds) shares gets its own storage at the
    capacity it had: sized to the kept part, the append that follows regrew it, copying the
    whole kept text twice on such a call."""
    a = "abc" * 100_000 + "é"
    shared, alone = _native.SessionText(a), _native.SessionText(a)
    for text in (shared, alone):
        text.replace_from(a + "d", len(a))  # an append: the storage grows with room to spare
    kept = shared.copy()
    for text in (shared, alone):
        text.replace_from(a + "de", len(a) + 1)
    assert str(shared) == str(alone) == a + "de" and str(kept) == a + "d"
    assert shared.nbytes == alone.nbytes


def test_long_prompts_compare_on_two_threads_and_find_the_first_difference():
    """From 256K code points the compare runs in 16K-code-point segments shared with a helper
    thread; the first difference must still be found wherever it falls, whichever thread
    scans its segment, and with later segments differing too."""
    segment, n = 64 * CHUNK, 300_000
    base = ("lorem ipsum é\n" * (n // 14 + 1))[:n - 1] + "😀"  # stored at 4 bytes a character
    text = _native.SessionText(base)
    for at in [0, 1, segment - 1, segment, 5 * segment + 17, n // 2, n - segment, n - 2, n - 1]:
        changed = base[:at] + "#" + base[at + 1:]
        assert text.common_prefix(changed) == at
        later = min(at + segment + 3, n - 1)
        assert text.common_prefix(changed[:later] + "#" + changed[later + 1:]) == at
        assert text.common_prefix(base[:at] + "#" * (n - at)) == at  # every segment from it differs
    assert text.common_prefix(base) == n
    assert text.common_prefix(base + "tail") == n and text.common_prefix(base[:-5]) == n - 5
    for _ in range(200):  # the helper thread joins some scans and not others
        assert text.common_prefix(base[:n // 3] + "#") == n // 3


def test_a_long_prompt_is_compared_at_its_tail_first_and_proven_whole_before_use():
    """compare() answers from the last 16K-32K code points at once and leaves the head to the
    helper thread: the provisional answer may be too late, never the proven one."""
    n = 300_000
    base = ("lorem ipsum é\n" * (n // 14 + 1))[:n]
    text = _native.SessionText(base)
    for at in [0, 17, 100_000, n - 70_000, n - 20_000, n - 1_000, n - 1]:
        changed = base[:at] + "#" + base[at + 1:] + "more"
        divergence = text.compare(changed)
        assert divergence.pending == HELPER
        head = (n - 16 * 1024) // (64 * CHUNK) * (64 * CHUNK)  # the last 16K, from a segment edge
        assert divergence.at == (n if HELPER and at < head else at)  # an edit in the head: not yet seen
        assert divergence.verified() == at == divergence.at and not divergence.pending
    divergence = text.compare(base[:1_000] + "#" + base[1_001:])
    text.replace_from(base + "x", n)  # changing the text first finishes the proof against the old one
    assert divergence.verified() == 1_000 and str(text) == base + "x"


def test_a_compare_finds_the_helper_taken_and_scans_alone():
    """One helper serves the process: while one compare holds it, another (of this text or of
    another) runs whole on its caller, exactly; once the first is proven the helper is free."""
    n = 300_000
    base = ("lorem ipsum\n" * (n // 12 + 1))[:n]
    first, second = _native.SessionText(base), _native.SessionText(base)
    held = first.compare(base[:10] + "#" + base[11:])
    other = second.compare(base[:20] + "#" + base[21:])
    same = first.compare(base[:30] + "#" + base[31:])
    assert not other.pending and other.at == 20 and not same.pending and same.at == 30
    assert held.verified() == 10
    assert second.compare(base[:40] + "#" + base[41:]).pending == HELPER


def test_a_child_forked_during_a_compare_proves_the_head_alone():
    n = 300_000
    base = ("lorem ipsum\n" * (n // 12 + 1))[:n]
    text = _native.SessionText(base)
    divergence = text.compare(base[:5] + "#" + base[6:])
    pid = os.fork()
    if pid == 0:  # the child: no helper thread; it must neither crash nor take another scan's answer
        later = _native.SessionText(base).compare(base[:200_000] + "#" + base[200_001:])
        os._exit(0 if (divergence.verified(), later.verified()) == (5, 200_000) else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert divergence.verified() == 5
