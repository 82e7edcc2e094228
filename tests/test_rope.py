"""Ropes read like the strings they stand for, made whole only where asked."""
import random

from zllm_core.rope import MAX_DEPTH, Rope, flat, nbytes, startswith_at, suffix_from


def test_a_rope_reads_like_its_string():
    rng = random.Random(0)
    text, rope = "héllo", "héllo"
    for k in range(3 * MAX_DEPTH):
        piece = "".join(rng.choice("ab😀\n") for _ in range(rng.randint(0, 5)))
        text, rope = text + piece, Rope(rope, piece)
        assert len(rope) == len(text) and flat(rope) == text and rope.depth <= MAX_DEPTH
        for start in (0, len(text) // 2, len(text) - len(piece), len(text)):
            assert suffix_from(rope, start) == text[start:]
            assert startswith_at(rope, piece, start) == text.startswith(piece, start)
        assert rope.endswith(piece) and rope.endswith(text[-7:])


def test_shared_pieces_count_once():
    base = "x" * 1000
    a = Rope(base, "y" * 10)
    b = Rope(a, "z" * 10)
    assert nbytes([a, b, base]) == nbytes([b]) < nbytes([base]) + 2 * nbytes(["y" * 10]) + 200
