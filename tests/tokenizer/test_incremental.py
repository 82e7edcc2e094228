"""Incremental tokenization equals full tokenization: A -> AB and A -> A'B for every family,
with small windows so that the splice proof (not the whole-text fallback) decides."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tokenizer.strategies import mixed_text
from tests.tokenizer.test_session_text import HELPER
from zllm_core import _native
from zllm_core.tokenizer import Tokenizer
from zllm_core.tokenizer.incremental import IncrementalTokenizer
from zllm_core.tokenizer.session_store import SessionStore

HF_SHAPES = ["qwen2", "llama3", "multi_split", "gpt2"]  # NFC, HF Split shapes, Split sequence
LINES = "def f(x):\n    return x + 1\n\nclass A:\n  pass\n" * 3  # stable boundaries before the splice


@pytest.fixture(scope="module")
def tokenizers(family_tokenizers, hf_json_dir) -> dict[str, Tokenizer]:
    hf = {f"hf_{s}": Tokenizer.from_tokenizer_json(hf_json_dir / f"{s}.json") for s in HF_SHAPES}
    return {**family_tokenizers, **hf}


def special_fragments(tok: Tokenizer) -> list[str]:
    out = []
    for s in list(tok.special_tokens)[:3]:
        out += [s, s[: len(s) // 2], s[len(s) // 2:]]
    return out


def assert_steps_exact(tok: Tokenizer, texts: list[str], window: int) -> IncrementalTokenizer:
    inc = IncrementalTokenizer(tok, window=window, shadow_rate=0)
    for text in texts:
        got = inc.encode(text, "scope", key="k").tolist()
        assert got == tok.encode(text, allowed_special="all"), (texts, text)
    return inc


ADVERSARIAL = {  # (context tail A, append B): the boundary lands inside what the reference joins
    "pipe|line": ("use a pipe", "line here"),
    "digits": ("total 12", "3456 items"),
    "digits long": ("n = 1234567", "89012\n"),
    "space lookahead |\\n": ("x = 1  ", "\nnext"),
    "space lookahead |x": ("x = 1    ", "x"),
    "newline absorption": ("end;\n", "\n\nstart"),
    "newline run": ("a\n\n", "  \n b"),
    "\\r|\\n": ("line\r", "\nline"),
    "contraction": ("I don", "'t know"),
    "contraction upper": ("I DON", "'T KNOW"),
    "contraction split": ("it'", "s"),
    "combining mark": ("caf\u0065", "\u0301 ol\u00e9"),
    "emoji zwj": ("family \U0001F468", "\u200d\U0001F469\u200d\U0001F467 ok"),
    "emoji modifier": ("hand \U0001F44D", "\U0001F3FD"),
    "leading space": ("word", " word"),
    "leading spaces": ("word", "   word"),
    "leading newline": ("word", "\n\n  word"),
    "leading tab": ("word\n", "\tword"),
    "punct slash": ("path\n", "/usr/bin"),
    "punct newline slash": ("a;\n", "/b"),
    "trailing spaces": ("word\n  ", "  "),
    "unicode space": ("a\n\u3000", "\u3000b"),
}


@pytest.mark.parametrize("case", ADVERSARIAL)
def test_adversarial_splices_are_exact(tokenizers, case):
    a, b = ADVERSARIAL[case]
    for name, tok in tokenizers.items():
        for window in (1, 4, 64):
            assert_steps_exact(tok, [LINES + a, LINES + a + b, LINES + a + b + "\n" + b], window)


@pytest.mark.parametrize("name", ["qwen2", "cl100k_base"])
def test_special_token_split_across_the_boundary(tokenizers, name):
    tok = tokenizers[name]
    special = list(tok.special_tokens)[-1]
    for cut in range(len(special) + 1):
        texts = [LINES + "user\n" + special[:cut], LINES + "user\n" + special + "\nassistant\n" + special]
        assert_steps_exact(tok, texts, window=2)


def test_repairs_are_spliced_not_recomputed(tokenizers):
    inc = assert_steps_exact(tokenizers["qwen2"], [LINES * 40, LINES * 40 + "more\n", LINES * 40 + "more\nx\n"], 512)
    assert inc.stats.repairs == 2 and inc.stats.accepted_at[0] == 2 and inc.stats.whole_window == 0


def address(ids) -> int:
    return ids.__array_interface__["data"][0]


def test_a_new_session_has_room_for_its_first_appends(tokenizers):
    """A session's text and tokens are stored with room to spare: its first resends append in
    place. Outgrowing them at the first resend copied both into freshly mapped pages (~0.45 ms
    at 1M characters), once per conversation."""
    tok = tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    text = LINES * 400
    buffer = address(inc.encode(text, "s", key="k"))
    session = inc.store.find("s", "", "k")
    sizes = session.tokens.nbytes, session.text.nbytes
    for i in range(10):
        text += f"turn {i}: " + "x = [1, 2, 3]\n" * 10
        ids = inc.encode(text, "s", key="k")
        assert ids.tolist() == tok.encode(text, allowed_special="all")
        del ids
    assert (session.tokens.nbytes, session.text.nbytes) == sizes
    assert address(inc.encode(text, "s", key="k")) == buffer


def test_returned_ids_never_change_as_the_session_moves_on(tokenizers):
    """A held result keeps its tokens while later calls rewrite the session's tail (the run
    moves to fresh buffers); with no result held, a call rewrites the tail in place."""
    tok = tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    base = LINES * 40
    inc.encode(base + "w = 1\n" * 50, "s", key="k")  # room for the shorter tails below
    held = inc.encode(base + "x = 1\n", "s", key="k")
    before = held.tolist()
    edited = inc.encode(base + "y = 22\n", "s", key="k")  # rewrites tokens `held` shows
    assert held.tolist() == before and not held.flags.writeable and not edited.flags.writeable
    assert edited.tolist() == tok.encode(base + "y = 22\n", allowed_special="all")
    buffer = address(edited)
    del held, edited
    again = inc.encode(base + "z = 333\n", "s", key="k")
    assert address(again) == buffer  # nobody held the old tokens: no copy
    assert again.tolist() == tok.encode(base + "z = 333\n", allowed_special="all")
    session = inc.store.find("s", "", "k")
    size, results = session.tokens.nbytes, []
    for i in range(20):  # every result held: each call copies, none grows the buffers
        results.append(inc.encode(base + f"v = {i}\n", "s", key="k"))
    assert session.tokens.nbytes == size
    assert [r.tolist() for r in results] == [tok.encode(base + f"v = {i}\n", allowed_special="all")
                                             for i in range(20)]
    with pytest.raises(ValueError):
        again.base.flags.writeable = True  # nor can a holder write through to the session


NFC_STEPS = {  # NFC composes across the splice, or the client re-sends its text decomposed
    "mark composes with the old end": ["a\nnote e", "a\nnote e\u0301 ok", "a\nnote e\u0301 ok\u0327"],
    "decomposed resend": ["a\ncaf\u00e9\n", "a\ncafe\u0301\nmore", "a\ncafe\u0301\nmore\u00e9\n"],
    "hangul jamo join": ["a\nx\u1100", "a\nx\u1100\u1161", "a\nx\u1100\u1161\u11a8!"],
    "marks reorder": ["a\nq\u0301", "a\nq\u0301\u0323 z", "a\nq\u0323\u0301 z\n"],
    "no ascii nearby": ["\u00e9" * 600, "\u00e9" * 600 + "e\u0301", "\u00e9" * 601 + "\u0301x"],
}


@pytest.mark.parametrize("case", NFC_STEPS)
def test_nfc_is_applied_incrementally_and_exactly(tokenizers, case):
    tok = tokenizers["hf_qwen2"]  # tokenizer.json with an NFC normalizer
    for window in (1, 64):
        inc = assert_steps_exact(tok, [LINES + t for t in NFC_STEPS[case]], window)
        assert inc.stats.cold == 1  # the session continued: no whole-text path after the first call


def test_nfc_checks_only_the_text_after_the_shared_prefix(tokenizers):
    tok = tokenizers["hf_qwen2"]
    head = "na\u0308ive\n" * 50_000  # decomposed: the first call normalizes it all
    normal = tok.normalize(head)
    assert normal != head and tok.normalize(normal) is normal
    appended = normal + "turn e\u0301\n"
    assert tok.normalize(appended, len(normal)) == tok.normalize(appended)
    already = normal + "x\n"
    assert tok.normalize(already, len(normal)) is already  # nothing to normalize after the prefix
    assert_steps_exact(tok, [head, head + "turn e\u0301\n"], 512)


def test_without_a_provable_boundary_the_window_doubles_then_falls_back(tokenizers):
    one_line = "word " * 10_000  # no newline, no special: nothing to prove a boundary with
    inc = assert_steps_exact(tokenizers["qwen2"], [one_line, one_line + "more"], 512)
    assert inc.stats.fallbacks == 1 and sum(inc.stats.accepted_at) == 0 and inc.stats.first_window_rate == 0
    text = one_line[:5000] + "\nx" + one_line[:1500]
    inc = assert_steps_exact(tokenizers["qwen2"], [text, text + "more"], 512)
    assert inc.stats.accepted_at[2] == 1  # the boundary lies 1.5K chars back: the second doubling finds it


def test_large_appends_route_to_full_tokenization(tokenizers):
    tok = tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, route_full_after=500, shadow_rate=0)
    for text in (LINES, LINES + "x\n" * 400, LINES + "x\n" * 400 + "y\n"):
        assert inc.encode(text, "s", key="k").tolist() == tok.encode(text)
    assert inc.stats.routed_full == 1 and inc.stats.repairs == 1


edits = st.tuples(mixed_text, st.floats(0, 1), mixed_text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), a=mixed_text, steps=st.lists(edits, min_size=1, max_size=4), window=st.sampled_from([1, 3, 8, 40]))
def test_random_appends_and_edits_are_exact(tokenizers, data, a, steps, window):
    name = data.draw(st.sampled_from(sorted(tokenizers)))
    tok = tokenizers[name]
    pieces = st.sampled_from(special_fragments(tok) + ["\n", "\n\n", " \n", "\r\n", "x\n"])
    text, texts = LINES + a + data.draw(pieces), []
    for append, cut, more in steps:
        texts.append(text)
        keep = len(LINES) + int(cut * (len(text) - len(LINES)))  # edits land anywhere after LINES
        text = text[:keep] + append + data.draw(pieces) + more
    assert_steps_exact(tok, texts + [text], window)


def test_keyless_calls_find_the_session_by_prefix(tokenizers):
    tok = tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    base = LINES * 400  # several checkpoints long
    inc.encode(base, "tenant-a")
    assert inc.encode(base + "appended\n", "tenant-a").tolist() == tok.encode(base + "appended\n")
    assert inc.stats.repairs == 1
    inc.encode(base + "other\n", "tenant-b")  # another scope never shares sessions
    assert inc.stats.cold == 2
    wider = base + "appended \U0001F600\n"  # CPython stores this str at 4 bytes a character
    assert inc.encode(wider, "tenant-a").tolist() == tok.encode(wider)
    assert inc.stats.repairs == 2 and inc.stats.cold == 2  # checkpoints hash code points, not storage


def test_checkpoint_hashes_cover_their_block_and_ignore_storage_width():
    stride = 4096
    text = "def f(x): return x \u00e9\n" * 16_000  # 384K code points: hashed on two threads
    full = _native.checkpoint_hashes(text, stride, 0)
    assert len(full) == len(text) // stride
    assert [_native.block_hash(text, k, stride) for k in (0, 7, len(full) - 1)] == [full[0], full[7], full[-1]]
    assert (_native.checkpoint_hashes(text, stride, 30) == full[30:]).all()
    for wider in (text + "\u03a9", text + "\U0001F600"):  # stored at 2 and at 4 bytes
        assert (_native.checkpoint_hashes(wider, stride, 0)[:len(full)] == full).all()
    at = 50 * stride + 7
    edited = _native.checkpoint_hashes(text[:at] + "#" + text[at + 1:], stride, 0)
    assert (edited != full).nonzero()[0].tolist() == [50]


def test_keyless_lookup_takes_the_session_holding_the_latest_block_and_a_sample_before(tokenizers):
    tok = tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    inc.store = SessionStore(1 << 30, lag=0, batch=1)  # every block indexed, the last ones too
    stride = inc.store.stride
    a = "".join(f"line {i} of conversation a\n" for i in range(8 * stride // 20))
    b = "".join(f"line {i} of conversation b\n" for i in range(8 * stride // 20))
    shared = "system prompt and tools\n" * (stride // 8)  # two blocks both conversations hold
    tail = "tool output repeated in both\n" * (stride // 8)
    inc.encode(shared + a + tail, "s")
    inc.encode(shared + b + tail, "s")  # forks a after the shared blocks
    assert inc.store.stats.sessions == 2
    # b now holds the tail's blocks at the same indices as a: a's continuation must see past them
    for text in (shared + a + tail + "next\n", shared + b + tail + "next\n"):
        assert inc.encode(text, "s").tolist() == tok.encode(text)
    assert inc.stats.cold == 1 and inc.stats.repairs == 3 and inc.store.stats.sessions == 2


def test_blocks_near_the_end_are_indexed_in_batches(tokenizers):
    inc = IncrementalTokenizer(tokenizers["qwen2"], shadow_rate=0)
    store = inc.store
    text = LINES * 400
    inc.encode(text, "s", key="k")
    session = store.find("s", "", "k")
    indexed = len(session.checkpoints)
    assert indexed % store.batch == 0 and indexed * store.stride <= len(text) - store.lag
    before = list(session.checkpoints)
    for turn in range(5):  # small appends, and a re-rendered end: the index stays as it was
        text = text[:-20] + f"turn {turn}\n" + "x" * 200 + "\n"
        inc.encode(text, "s", key="k")
        assert session.checkpoints == before
    text += LINES * 200  # grown past a batch: indexed up to the lag again
    inc.encode(text, "s", key="k")
    assert len(session.checkpoints) > indexed and session.checkpoints[:indexed] == before


def test_keyless_fork_keeps_the_original_conversation(tokenizers):
    tok = tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    base = LINES * 400
    first = base + "first branch\n" + LINES * 100  # a long tail after the branch point
    inc.encode(first, "s")
    inc.encode(base + "second branch\n", "s")  # would discard the long tail: a fork
    assert inc.store.stats.sessions == 2
    text = first + "more\n"
    assert inc.encode(text, "s").tolist() == tok.encode(text)
    assert inc.stats.cold == 1 and inc.store.stats.sessions == 2


def test_keyless_call_discarding_a_short_tail_continues_in_place(tokenizers):
    """A template that re-renders the last turn (dropping its reasoning) discards a short tail:
    copying the whole session for it would cost more than a sibling re-tokenizing it."""
    tok = tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    base = LINES * 400
    inc.encode(base + "[reasoning]answer\n", "s")
    for text in (base + "answer\nnext question\n", base + "[reasoning]answer\nagain\n"):
        assert inc.encode(text, "s").tolist() == tok.encode(text)
    assert inc.store.stats.sessions == 1 and inc.stats.cold == 1 and inc.stats.repairs == 2


def test_sessions_are_evicted_least_recently_used_first(tokenizers):
    tok = tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, budget_bytes=1_000_000, shadow_rate=0)
    for k in range(4):
        inc.encode(f"conversation {k}\n" + LINES * 500, "s", key=str(k))
    assert inc.store.stats.evictions > 0 and inc.store.stats.bytes <= 1_000_000
    assert inc.store.find("s", "", "3") is not None and inc.store.find("s", "", "0") is None


def test_save_as_renames_the_session_for_the_next_call(tokenizers):
    tok = tokenizers["qwen2"]
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    inc.encode(LINES, "s", save_as="resp_1")
    text = LINES + "next turn\n"
    assert inc.encode(text, "s", key="resp_1", save_as="resp_2").tolist() == tok.encode(text)
    assert inc.store.find("s", "", "resp_2") is not None and inc.stats.cold == 1


def test_lone_surrogates_are_repaired_like_the_reference(tokenizers):
    tok = tokenizers["cl100k_base"]
    texts = [LINES, LINES + "a\ud800b\n", LINES + "a\ud800b\nc\udc00"]
    inc = IncrementalTokenizer(tok, window=4, shadow_rate=0)
    for text in texts:
        assert inc.encode(text, "s", key="k").tolist() == tok.encode(text)


def boundaries(tok: Tokenizer, text: str, allowed="all", old: str | None = None) -> tuple[int, int]:
    policy = tok.special_policy(allowed)
    return _native.stable_boundaries(tok.native, tok.rules[0].to_native(), policy, old or text, text, 0, len(text))


def test_stable_boundaries_after_newlines_and_allowed_specials(tokenizers):
    tok = tokenizers["qwen2"]
    assert boundaries(tok, "a\nbc\nd") == (2, 5)
    assert boundaries(tok, "a \n  b\n\n") == (3, 3)  # before the space run; not where text may follow
    text = "a\n<|im_end|>\n<|im_start|>x"
    assert boundaries(tok, text) == (12, 25)  # after each special, never next to one after \n
    assert boundaries(tok, text, allowed=frozenset()) == (-1, -1)  # ordinary text: no segment
    assert boundaries(tok, text, old="a\n<|im_end|>\n<|im_startX") == (12, 12)  # old text differs


@pytest.mark.parametrize("keyless", [False, True])
def test_long_prompts_edited_before_their_tail_are_exact(tokenizers, keyless):
    """A prompt of 128K+ code points is repaired from the divergence its last 16K show while
    the helper thread proves the head; an edit in the head must send the repair back there,
    whether the tail alone looked unchanged, appended to, or routed to the full path."""
    tok = tokenizers["cl100k_base"]
    base = (LINES * (300_000 // len(LINES) + 1))[:300_000]
    edit = base[:20_000] + "EDITED" + base[20_006:]
    again = base[:40_000] + "AGAIN" + edit[40_005:]
    steps = (base, base + "turn\n",  # an append
             edit + "turn\nmore\n",  # the tail says append, the head was edited
             again + "turn\nmore\n",  # the tail says unchanged
             again + "turn\nmore\n" + "y\n" * 600,  # a long append (routed when route is set)
             edit + "turn\nmore\n" + "y\n" * 1200)  # the tail says long append, the head was edited
    for route in (None, 1_000):
        inc = IncrementalTokenizer(tok, route_full_after=route, shadow_rate=0)
        for text in steps:
            got = inc.encode(text, "s", key=None if keyless else "k").tolist()
            assert got == tok.encode(text, allowed_special="all")
        assert inc.stats.unchanged == 0 and inc.stats.moved == (3 if HELPER else 0)


def test_a_key_naming_a_user_still_continues_each_of_its_conversations(tokenizers):
    """Anthropic's metadata.user_id names a user: two conversations of one user alternate under
    one key. A keyed call that would discard most of its session takes the session sharing
    the longest prefix instead (and a discarding call forks, keeping the other conversation)."""
    tok = tokenizers["qwen2"]
    system = (LINES * 200)[:10_000]
    convs = [system + f"user: task {name}\n" + (LINES * 200)[k:k + 30_000] for k, name in ((0, "A"), (999, "B"))]
    inc = IncrementalTokenizer(tok, shadow_rate=0)
    for turn in range(4):
        for c in range(2):
            convs[c] += f"assistant: step {turn}\nuser: ok\n"
            assert inc.encode(convs[c], "s", key="user-1").tolist() == tok.encode(convs[c], allowed_special="all")
    assert inc.stats.cold == 1 and inc.stats.rekeyed == 6  # B forks from A once; then each call finds its own
    assert inc.stats.repairs == 7 and inc.store.stats.sessions == 2
