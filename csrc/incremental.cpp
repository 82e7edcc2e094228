// Native steps of incremental tokenization (zllm_core/tokenizer/incremental.py): the repair
// (which positions are stable piece boundaries, re-encoding from one with token end offsets,
// the old/new agreement check), and chained checkpoint hashes for finding a session by text
// prefix. Where two texts diverge is SessionText's job (session_text.h).
//
// Stable boundary (the proof; rules in zllm_core/tokenizer/rules.py, scanner in pretokenizer.cpp).
// The scanner decides the piece starting at c by reading only text at c and to its right, so
// a piece chain is fixed by its start and the text. Call s a stable boundary of text t when
//   (a) t[s-1] is CR or LF;
//   (b) the whitespace run t[s:r) holds no CR/LF and is followed by a non-whitespace char z at
//       r (r == s when the family has no `\s*[\r\n]+` rule; z != '/' when r == s and
//       punctuation absorbs `/`);
//   (c) in the old text and in the new one, no special token starts in [s - 1, r + len(z))
//       and none that starts earlier reaches past s - 1.
// Then no piece that starts before s can extend past s: letters, digits and contractions
// never contain CR/LF and their prefixes exclude it; punctuation's `[\r\n]*` tail stops at
// the space or z; a whitespace piece ends at or before the run's last newline, which is
// t[s-1]. So some piece ends exactly at s. And every decision for a piece starting before s
// reads text before R = r + len(z) only (class runs stop at the run's end, contractions look
// at most two characters ahead, a whitespace run is read to z). Hence if an old and a new
// text agree on [0, R) and (c) holds, both have a piece boundary at s, the same pieces (so
// the same tokens) before it, and tokens after it are those of the new text's tail alone.
// (c) makes the special-token scan cut both texts the same way before R, so s lies in an
// ordinary segment whose scanner sees the same text up to R. Later grammars of a Hugging Face
// Sequence only split the first grammar's pieces, so the first grammar decides. Positions are
// UTF-8 bytes of segments that start at the same offset of both texts.
//
// The end b of a special token [a, b) is a stable boundary too when the token is allowed,
// it is the longest special matching at a in both texts, and in neither text does a special
// that starts before a reach past a: the special scan, which takes the longest match at the
// leftmost position and resumes after it, then arrives at a and matches [a, b) in both texts
// whatever precedes it, text before a is a segment of its own with the same end, and text
// after b is scanned afresh from b, as a tokenization of the tail alone would be.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "session_text.h"
#include "token_run.h"
#include "tokenizer_core.h"

namespace py = pybind11;

namespace zllm {
namespace {

struct View {
  const uint8_t* data;
  size_t size;
};

// UTF-8 of the code points [from, to) of a str, read from its storage: borrowed when the str is
// ASCII, else encoded into a buffer owned here (never the str's cached UTF-8 copy, which would
// cost O(text) and then live as long as the str).
class Utf8 {
 public:
  Utf8(const py::str& s, size_t from, size_t to) {
    const StrStorage st(s.ptr());
    to = std::min(to, st.size);
    from = std::min(from, to);
    if (PyUnicode_IS_ASCII(s.ptr())) {
      view = View{st.bytes(from), to - from};
      return;
    }
    append_utf8(st, from, to, owned_);
    view = View{reinterpret_cast<const uint8_t*>(owned_.data()), owned_.size()};
  }
  explicit Utf8(const py::str& s) : Utf8(s, 0, SIZE_MAX) {}
  explicit Utf8(std::string owned) : owned_(std::move(owned)) {
    view = View{reinterpret_cast<const uint8_t*>(owned_.data()), owned_.size()};
  }

  View view;

 private:
  std::string owned_;
};

bool continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

size_t count_chars(const uint8_t* p, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) c += !continuation(p[i]);
  return c;
}

// Byte offset of code point `chars` in t (t.size if past the end).
size_t byte_offset(const View& t, size_t chars) {
  size_t i = 0;
  for (size_t c = 0; i < t.size; ++i)
    if (!continuation(t.data[i]) && c++ == chars) return i;
  return t.size;
}

template <class Char>
bool any_surrogate(const Char* p, size_t n) {  // branch-free, so it vectorises
  bool found = false;
  for (size_t i = 0; i < n; ++i) found |= (uint32_t(p[i]) & 0xFFFFF800u) == 0xD800u;
  return found;
}

// Whether s[start:] holds a surrogate code point (only str of kind 2 or 4 can).
bool has_surrogates(const py::str& s, size_t start) {
  const StrStorage st(s.ptr());
  if (start >= st.size) return false;
  if (st.kind == 2) return any_surrogate(static_cast<const uint16_t*>(st.data) + start, st.size - start);
  return st.kind == 4 && any_surrogate(static_cast<const uint32_t*>(st.data) + start, st.size - start);
}

CharClass class_at(const uint8_t* t, size_t i, int* len) {
  if (t[i] < 0x80) {
    *len = 1;
    return char_class(t[i]);
  }
  return char_class(decode_utf8(t, i, len));
}

// The tokenizer's specials, for finding them at a position (a first-byte table skips most).
class SpecialIndex {
 public:
  explicit SpecialIndex(const TokenizerCore& core) : specials_(core.specials()) {
    for (const Special& sp : specials_) {
      first_[uint8_t(sp.bytes[0])] = true;
      longest = std::max(longest, sp.bytes.size());
    }
  }

  // Index (in core.specials(), longest first) of the longest special at t[i], or -1.
  long at(const View& t, size_t i) const {
    if (!first_[t.data[i]]) return -1;
    for (size_t k = 0; k < specials_.size(); ++k) {
      const std::string& b = specials_[k].bytes;
      if (b.size() <= t.size - i && std::memcmp(t.data + i, b.data(), b.size()) == 0) return long(k);
    }
    return -1;
  }
  size_t length(long k) const { return specials_[size_t(k)].bytes.size(); }

  bool starts_in(const View& t, size_t from, size_t to) const {
    for (size_t i = from; i < to && i < t.size; ++i)
      if (at(t, i) >= 0) return true;
    return false;
  }
  // Whether the longest special at some i in [from, to) ends after `to`.
  bool crosses(const View& t, size_t from, size_t to) const {
    for (size_t i = from; i < to && i < t.size; ++i) {
      long k = at(t, i);
      if (k >= 0 && i + length(k) > to) return true;
    }
    return false;
  }

  size_t longest = 0;

 private:
  const std::vector<Special>& specials_;
  bool first_[256] = {};
};

// R (end of the text the proof reads) if s is a stable boundary of t, else 0. Needs s >= 1.
// `other` is the old text, which must agree with t on [0, R) and be free of specials too.
size_t stable_reads(const SpecialIndex& specials, const Grammar& g, const View& t,
                    const View& other, size_t s) {
  if (t.data[s - 1] != '\n' && t.data[s - 1] != '\r') return 0;
  size_t r = s;
  int len = 1;
  for (; r < t.size; r += len) {
    if (t.data[r] == '\r' || t.data[r] == '\n') return 0;
    if (class_at(t.data, r, &len) != kSpace) break;
  }
  if (r >= t.size || (r != s && !g.newline_rule) || (r == s && g.punct_slash && t.data[r] == '/')) return 0;
  const size_t reads = r + len;
  const size_t from = s > specials.longest ? s - specials.longest : 0;
  for (const View* x : {&t, &other})
    if (specials.crosses(*x, from, s - 1) || specials.starts_in(*x, s - 1, reads)) return 0;
  return reads;
}

// Stable boundaries found in the new text t (proof above), as byte offsets.
class BoundaryScan {
 public:
  BoundaryScan(const TokenizerCore& core, const Grammar& g, const SpecialPolicy& policy, View t, View old)
      : specials_(core), g_(g), policy_(policy), t_(t), old_(old) {}

  // Calls visit(s) for each stable boundary s in [lo, limit] proven from text before limit.
  template <class Visit>
  void run(size_t lo, size_t limit, Visit visit) const {
    if (!g_.digits_only)
      for (size_t i = lo ? lo - 1 : 0; i < limit; ++i) {
        const uint8_t b = t_.data[i];
        if ((b == '\n' || b == '\r') && i + 1 < t_.size) {
          size_t reads = stable_reads(specials_, g_, t_, old_, i + 1);
          if (reads && reads <= limit) visit(i + 1);
        }
      }
    const size_t longest = specials_.longest;
    for (size_t a = lo > longest ? lo - longest : 0; a < limit; ++a) {
      size_t end = special_end(a);
      if (end && end >= lo && end <= limit) visit(end);
    }
  }

 private:
  size_t special_end(size_t a) const {  // b if [a, b) is a stable special, else 0
    long k = specials_.at(t_, a);
    if (k < 0 || !policy_.any || !policy_.allowed[size_t(k)] || specials_.at(old_, a) != k) return 0;
    const size_t from = a > specials_.longest ? a - specials_.longest : 0;
    if (specials_.crosses(t_, from, a) || specials_.crosses(old_, from, a)) return 0;
    return a + specials_.length(k);
  }

  SpecialIndex specials_;
  const Grammar& g_;
  const SpecialPolicy& policy_;
  View t_, old_;
};

// The first stable boundary s >= lo of t and the last one, proven from t[:limit] where t and
// old agree (byte offsets; first == SIZE_MAX when there is none).
struct Boundaries {
  size_t first = SIZE_MAX, last = 0;
};

Boundaries find_boundaries(const TokenizerCore& core, const Grammar& g, const SpecialPolicy& policy,
                           View t, View old, size_t lo, size_t limit) {
  Boundaries found;
  BoundaryScan(core, g, policy, t, old).run(lo, std::min(limit, old.size), [&](size_t s) {
    found.first = std::min(found.first, s);
    found.last = std::max(found.last, s);
  });
  return found;
}

// (first, last) as code points of the given texts, (-1, -1) when there is none.
py::tuple stable_boundaries(const TokenizerCore& core, const Grammar& g, const SpecialPolicy& policy,
                            const py::str& old, const py::str& text, size_t lo, size_t limit) {
  Utf8 t(text), o(old);
  const Boundaries b = find_boundaries(core, g, policy, t.view, o.view, byte_offset(t.view, lo),
                                       byte_offset(t.view, limit));
  if (b.first == SIZE_MAX) return py::make_tuple(-1, -1);
  const long first_c = long(count_chars(t.view.data, b.first));
  return py::make_tuple(first_c, first_c + long(count_chars(t.view.data + b.first, b.last - b.first)));
}

size_t token_length(const TokenizerCore& core, uint32_t id) {
  const auto& off = core.model().offsets();
  if (core.model().has(id)) return off[id + 1] - off[id];
  for (const Special& sp : core.specials())
    if (sp.id == id) return sp.bytes.size();
  throw py::key_error(std::to_string(id));
}

// Tokens of t and the code point offset (plus base) where each one ends; a token ending
// inside a character ends after it (so the token that completes a character ends there too,
// and exactly the tokens before a character boundary have ends at or before it).
void encode_with_ends(TokenizerCore& core, const SpecialPolicy& policy, View t, size_t base, Tokens& tokens,
                      std::vector<uint32_t>& ends) {
  long bad;
  {
    py::gil_scoped_release nogil;
    std::unique_ptr<PieceCache> cache = core.acquire_cache();
    bad = core.encode(t.data, t.size, policy, *cache, tokens);
    core.release_cache(std::move(cache));
  }
  if (bad >= 0) throw py::value_error("disallowed special token in text");
  ends.resize(tokens.size);
  size_t at = 0, chars = base;
  const uint32_t* offsets = core.model().offsets().data();
  for (size_t k = 0; k < tokens.size; ++k) {
    // Token lengths are read from a table of the whole vocabulary, cold after other work.
    if (k + 16 < tokens.size) __builtin_prefetch(offsets + tokens.ids[k + 16]);
    const size_t end = at + token_length(core, tokens.ids[k]);
    for (; at < end; ++at) chars += !continuation(t.data[at]);
    ends[k] = uint32_t(chars);
  }
}

// `run` keeps its first k tokens, then the given ones.
void splice(TokenRun& run, size_t k, const Tokens& tokens, const std::vector<uint32_t>& ends) {
  auto [ids, at] = run.keep_and_extend(k, tokens.size);
  std::memcpy(ids, tokens.ids.get(), tokens.size * sizeof(uint32_t));
  std::memcpy(at, ends.data(), tokens.size * sizeof(uint32_t));
}

TokenRun encode_tail(TokenizerCore& core, const SpecialPolicy& policy, const py::str& text) {
  Utf8 t(text);
  Tokens tokens;
  std::vector<uint32_t> ends;
  encode_with_ends(core, policy, t.view, 0, tokens, ends);
  TokenRun run;
  splice(run, 0, tokens, ends);
  return run;
}

// Where a repair may splice: re-tokenize from `start` (code points), after old tokens that end
// exactly there; `last` is the last proven boundary before the divergence (the old and new
// tokens must agree up to it), or `start` when the window reached the text start.
struct Splice {
  size_t start = 0, last = 0;
  int attempt = 0;
};

// The repair's outcome: tokens to keep, then the new text's tokens from `start`. kMoved: the
// divergence the repair started from was provisional and the proven one lies earlier.
enum Outcome : int { kSpliced = 0, kNoBoundary = -1, kDisagree = -2, kMoved = -3 };

// How many old tokens precede the splice, or -1 when the old tokens do not end at the proven
// boundaries or disagree with the new ones between them.
long kept_tokens(const TokenRun& old, const Splice& sp, const Tokens& tokens, const std::vector<uint32_t>& ends) {
  const uint32_t* old_ends = old.ends();
  const size_t n_old = old.size(), n = tokens.size;
  const size_t kept = size_t(std::upper_bound(old_ends, old_ends + n_old, uint32_t(sp.start)) - old_ends);
  if (sp.start && (kept == 0 || old_ends[kept - 1] != sp.start)) return -1;
  if (sp.last <= sp.start) return long(kept);
  const size_t upto = size_t(std::upper_bound(old_ends, old_ends + n_old, uint32_t(sp.last)) - old_ends);
  const size_t m = upto - kept;
  if (upto == 0 || old_ends[upto - 1] != sp.last || m > n || (m && ends[m - 1] != sp.last)) return -1;
  const bool same = std::equal(old.ids() + kept, old.ids() + upto, tokens.ids.get()) &&
                    std::equal(old_ends + kept, old_ends + upto, ends.data());
  return same ? long(kept) : -1;
}

// A repair worked out but not applied: where it splices, and the new tokens from there.
struct Plan {
  Outcome outcome = kSpliced;
  Splice sp;
  long kept = 0;  // old tokens before the splice
  Tokens fresh;
  std::vector<uint32_t> ends;
};

// Finds a stable boundary in a window of `window` code points before `diverged` (doubling it up
// to max_doublings times), tokenizes text from there and checks the old tokens against the
// new ones.
Plan plan_repair(TokenizerCore& core, const Grammar& g, const SpecialPolicy& policy, const SessionText& old,
                 const py::str& text, size_t diverged, const TokenRun& tokens, size_t window, int max_doublings) {
  const size_t longest = SpecialIndex(core).longest;
  Plan plan;
  Splice& sp = plan.sp;
  std::optional<Utf8> tail;  // text from the window's base, kept for encoding
  size_t base = 0, start_b = 0;
  for (size_t width = window;; width *= 2, ++sp.attempt) {
    if (sp.attempt > max_doublings) {
      plan.outcome = kNoBoundary;
      return plan;
    }
    if (width >= diverged) {  // the window reaches the text start
      base = sp.start = sp.last = start_b = 0;
      tail.emplace(text);
      break;
    }
    const size_t lo = diverged - width;
    base = lo > 2 * longest ? lo - 2 * longest : 0;  // room for a special around the proof's reads
    tail.emplace(text, base, SIZE_MAX);
    const Utf8 o(old.utf8(base, diverged + longest + 1));
    const Boundaries b = find_boundaries(core, g, policy, tail->view, o.view, byte_offset(tail->view, lo - base),
                                         byte_offset(tail->view, diverged - base));
    if (b.first == SIZE_MAX) continue;
    start_b = b.first;
    sp.start = base + count_chars(tail->view.data, b.first);
    sp.last = sp.start + count_chars(tail->view.data + b.first, b.last - b.first);
    break;
  }
  const View from_start{tail->view.data + start_b, tail->view.size - start_b};
  encode_with_ends(core, policy, from_start, sp.start, plan.fresh, plan.ends);
  plan.kept = kept_tokens(tokens, sp, plan.fresh, plan.ends);
  if (plan.kept < 0) plan.outcome = kDisagree;
  return plan;
}

// One repair of a session (zllm_core/tokenizer/incremental.py): old and text agree on their
// first `diverged` code points (provisionally while `divergence`, when given, is pending: the
// repair is then worked out first and applied only once the divergence is proven, else kMoved);
// `tokens` are old's. Returns (outcome, attempt, start, forked): on kSpliced the new text's
// tokens from `start` replace those after it and text replaces old, in `tokens` and `old`
// themselves, or with fork set in a new TokenRun (`forked`) that leaves both as they were.
// (Splicing here, not in Python after the return, keeps a 1M-character call's bookkeeping off
// its critical path: after the proof has swept the caches, every Python step costs misses.)
py::tuple repair(TokenizerCore& core, const Grammar& g, const SpecialPolicy& policy, SessionText& old,
                 const py::str& text, size_t diverged, TokenRun& tokens, size_t window, int max_doublings, bool fork,
                 Divergence* divergence) {
  Plan plan;
  try {
    plan = plan_repair(core, g, policy, old, text, diverged, tokens, window, max_doublings);
  } catch (...) {  // a disallowed special: let the helper go before the error reaches Python
    if (divergence != nullptr) divergence->verified();
    throw;
  }
  if (divergence != nullptr && divergence->verified() != diverged) plan.outcome = kMoved;
  if (plan.outcome != kSpliced) return py::make_tuple(int(plan.outcome), plan.sp.attempt, plan.sp.start, py::none());
  py::object forked = py::none();
  if (fork) {
    TokenRun run = tokens.prefix(size_t(plan.kept));
    splice(run, size_t(plan.kept), plan.fresh, plan.ends);
    forked = py::cast(std::move(run));
  } else {
    old.replace_from(text.ptr(), diverged);  // first: it may refuse (over 4 GB), changing nothing
    splice(tokens, size_t(plan.kept), plan.fresh, plan.ends);
  }
  return py::make_tuple(int(kSpliced), plan.sp.attempt, plan.sp.start, forked);
}

// Hashes of text's blocks of `stride` code points, blocks first, first + 1, ... up to `end`
// (exclusive; clipped to the last full block): each block on its own, so a session's index
// entries after an edit are recomputed from the edit on, and a lookup can hash just the blocks
// it probes. One thread: a helper that may outlive the call must not write into its result,
// and a call hashes a whole text only when a session begins (most hash a block or two).
py::array_t<uint64_t> checkpoint_hashes(const py::str& text, size_t stride, size_t first, size_t end) {
  const StrStorage s(text.ptr());
  end = std::min(end, s.size / stride);
  const size_t count = end > first ? end - first : 0;
  py::array_t<uint64_t> out(count);
  uint64_t* h = out.mutable_data();
  for (size_t k = 0; k < count; ++k) h[k] = hash_code_points(s, (first + k) * stride, stride);
  return out;
}

uint64_t block_hash(const py::str& text, size_t block, size_t stride) {
  const StrStorage s(text.ptr());
  if ((block + 1) * stride > s.size) throw py::index_error("block past the text's end");
  return hash_code_points(s, block * stride, stride);
}

}  // namespace

void register_incremental(py::module_& m) {
  py::class_<TokenRun>(m, "TokenRun", "A session's token ids and their end offsets (csrc/token_run.h).")
      .def(py::init<>())
      .def_property_readonly("size", &TokenRun::size)
      .def_property_readonly("nbytes", &TokenRun::nbytes)
      .def_property_readonly("ids", &TokenRun::ids_view, "The ids, a read-only array later changes never reach.")
      .def_property_readonly("ends", &TokenRun::ends_view, "End offsets in code points, likewise.")
      .def("prefix", &TokenRun::prefix, py::arg("k"), "A new TokenRun of the first k tokens.");
  m.def("has_surrogates", &has_surrogates, py::arg("text"), py::arg("start"), "Whether text[start:] holds a surrogate.");
  m.def("stable_boundaries", &stable_boundaries, py::arg("core"), py::arg("grammar"), py::arg("policy"), py::arg("old"),
        py::arg("text"), py::arg("lo"), py::arg("limit"), "(first, last) stable piece boundaries >= lo, proven from the shared text[:limit].");
  m.def("repair", &repair, py::arg("core"), py::arg("grammar"), py::arg("policy"), py::arg("old"), py::arg("text"),
        py::arg("diverged"), py::arg("tokens"), py::arg("window"), py::arg("max_doublings"), py::arg("fork"),
        py::arg("divergence") = nullptr,
        "(outcome, attempt, start, forked): splice text's tokens onto old's at a proven boundary "
        "(and text onto old, unless forked).");
  m.def("encode_tail", &encode_tail, py::arg("core"), py::arg("policy"), py::arg("text"),
        "A TokenRun of text: its ids and their end offsets in code points.");
  m.def("checkpoint_hashes", &checkpoint_hashes, py::arg("text"), py::arg("stride"), py::arg("first"),
        py::arg("end") = SIZE_MAX, "Hashes of text's full blocks of stride code points, blocks [first, end).");
  m.def("block_hash", &block_hash, py::arg("text"), py::arg("block"), py::arg("stride"),
        "The hash of text's block `block` (code points [block * stride, (block + 1) * stride)).");
}

}  // namespace zllm
