"""Hypothesis strategies for text that stresses every pre-tokenizer rule."""
from __future__ import annotations

from hypothesis import strategies as st

LETTERS = ("aZ", "Straße", "ǅ", "ʰʲ", "ªº", "Ωμέγα", "Привет", "ПРИВЕТ", "中文字符", "ひらがなカタカナ", "한국어",
           "مرحبا", "שלום", "हिन्दी", "ﬁ", "İı", "ſ", "ǈǋ", "ᾈ")
MARKS = ("\u0301", "\u0308\u0323", "\u20dd", "\u0903", "\u093f", "\ufe0f")
DIGITS = ("0123456789", "٠١٢٣٤٥٦٧٨٩", "１２３", "²³", "ⅫⅣ", "①②", "𝟘𝟙", "߀")
EMOJI = ("👍", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🧑🏿‍💻", "©", "™")
PUNCT = ("'", "\"", "/", "//", "...", "->", "#", "@", "_", "-", "!?", "{}", "<|", "|>", "€", "¿", "«»", "、", "。")
SPACES = (" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\r\n\r\n", " \n", "  \n ", "\t\n", "\x0b", "\x0c",
          "\xa0", "\u2028", "\u2029", "\u3000", "\x85", "\u200b", " \r\n  ", "\n \n")
CONTRACTIONS = ("'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'lL", "'d",
                "'D", "'ſ", "'x", "''s", "n't", "DON'T", "it's", "O'Neil")


def digit_run(draw_len: int, digits: str) -> str:
    return (digits * (draw_len // len(digits) + 1))[:draw_len]


fragments = st.one_of(
    st.sampled_from(LETTERS + MARKS + EMOJI + PUNCT + SPACES + CONTRACTIONS),
    st.builds(digit_run, st.integers(1, 14), st.sampled_from(DIGITS)),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=6),
    st.text(st.sampled_from("aA1 \n\t'.é\u0301"), max_size=10),
)
mixed_text = st.lists(fragments, max_size=30).map("".join)

# Long mostly-ASCII text (code-like), so that whole 64-byte windows take the block rules:
# every ASCII class, runs of each across window edges, contractions in both cases, and a rare
# non-ASCII character (a Unicode space, letter or dash) that stops a window.
ASCII_FRAGMENTS = ("foo", "Bar", "x", "ALLCAPS", "camelCase", "HTTPServer", "0", "12", "1234567", "(", ")", "()",
                   "{}", "=", ":", "->", "//", "...", "#", "\"", "'", "''", "_", "-", "    ", "        ", "\t", "\n",
                   "\n\n", "\r\n", "\r", " \n", "  \n ", "\t\n", "\x0b", "\x0c", " \r\n  ", "\n \n", ".\n",
                   ".\n\n  ", "(\r\n", ".\n/", "(\n//x", "\x00", "\x1f", "\x7f", "é", "\u3000", "\xa0", "—")
ascii_text = st.lists(
    st.one_of(
        st.sampled_from(ASCII_FRAGMENTS + SPACES[:17] + CONTRACTIONS),
        st.text(st.sampled_from("aA1 \n\r\t'.(/sdmtlvrSDMTLVRE"), max_size=12),
    ),
    min_size=8, max_size=120,
).map("".join)
