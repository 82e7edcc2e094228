// The token fence's vocabulary walk: run a byte DFA from one state over the vocabulary and
// pack the tokens that live, with at most `limit` bytes left to acceptance, into one bitmask
// row. The walk goes over a trie of the tokens' bytes in preorder: a dead byte skips every
// token below it, so a structural state (where nearly every token dies on its first or second
// byte) costs about its living nodes, not the vocabulary. From a loop state (inside a JSON
// string or free text: bytes and characters that return to it) the caller passes the
// precomputed row of the tokens made only of such units, which all end where they began, and
// the trie of the others (quotes, escapes, split characters: a few thousand).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace py = pybind11;

namespace zllm {
namespace {

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

// The tokens' bytes: token k of the walk spells bytes[off[k]:off[k + 1]] and has id ids[k].
struct Tokens {
  const uint8_t* bytes;
  const int64_t* off;
  const int32_t* ids;
  int64_t n;
};

Tokens tokens_of(const Array<uint8_t>& flat, const Array<int64_t>& offsets, const Array<int32_t>& order) {
  const int64_t n = offsets.size() - 1;
  if (offsets.ndim() != 1 || n < 0 || order.size() != n) {
    throw std::invalid_argument("fence: offsets [n + 1] and order [n]");
  }
  const int64_t* off = offsets.data();
  if (off[0] != 0 || off[n] != flat.size()) throw std::invalid_argument("fence: offsets do not span flat");
  return {flat.data(), off, order.data(), n};
}

struct Dfa {
  const int32_t* table;
  const uint8_t* cls;
  const int32_t* dist;
  int64_t states, width;
  int32_t dead;

  int32_t next(int32_t s, uint8_t b) const { return table[s * width + cls[b]]; }
};

Dfa dfa_of(const Array<int32_t>& table, const Array<uint8_t>& classes, const Array<int32_t>& distance,
           int32_t start) {
  if (table.ndim() != 2 || classes.size() != 256 || distance.size() != table.shape(0)) {
    throw std::invalid_argument("fence: table [states, classes], classes [256], distance [states]");
  }
  const int64_t states = table.shape(0), width = table.shape(1);
  if (start < 0 || start >= states) throw std::invalid_argument("fence: start state out of range");
  const uint8_t* cls = classes.data();
  for (int b = 0; b < 256; ++b) {
    if (cls[b] >= width) throw std::invalid_argument("fence: a byte class past the table");
  }
  return {table.data(), cls, distance.data(), states, width, static_cast<int32_t>(states - 1)};
}

// Bits are set for tokens that live within `limit`; `closest` is the fewest bytes any living
// token leaves (-1: none lives), which tells the caller the tightest budget that allows one.
struct Row {
  py::array_t<int32_t> words;
  uint32_t* bits;
  int64_t width;
  int32_t closest = -1;

  explicit Row(int64_t vocab_size) : words((vocab_size + 31) / 32), width(words.size()) {
    bits = reinterpret_cast<uint32_t*>(words.mutable_data());
    std::memset(bits, 0, sizeof(uint32_t) * width);
  }
  void live(int32_t id, int32_t left, int32_t limit) {
    if (closest < 0 || left < closest) closest = left;
    if (left <= limit) bits[id >> 5] |= 1u << (id & 31);
  }
};

// The trie: node i (preorder; 0 is the root) is reached by byte[i] from its parent, lies
// depth[i] bytes down, its subtree ends before node end[i], and the tokens spelled exactly by
// its path are ids[ids_start[i]:ids_start[i + 1]].
// Built once per vocabulary, it checks the layout (which may come from a cache file) that the
// walks below then trust.
py::tuple fence_trie(const Array<uint8_t>& flat, const Array<int64_t>& offsets, const Array<int32_t>& order,
                     int64_t vocab_size) {
  const Tokens tok = tokens_of(flat, offsets, order);
  for (int64_t k = 0; k < tok.n; ++k) {
    if (tok.off[k + 1] < tok.off[k] || tok.ids[k] < 0 || tok.ids[k] >= vocab_size) {
      throw std::invalid_argument("fence_trie: offsets decrease or a token id lies past the vocabulary");
    }
  }
  std::vector<int64_t> sorted(tok.n);
  std::iota(sorted.begin(), sorted.end(), 0);
  auto spelled = [&](int64_t k) {
    return std::string_view(reinterpret_cast<const char*>(tok.bytes + tok.off[k]), tok.off[k + 1] - tok.off[k]);
  };
  std::stable_sort(sorted.begin(), sorted.end(), [&](int64_t a, int64_t b) { return spelled(a) < spelled(b); });
  std::vector<uint8_t> byte{0};
  std::vector<uint16_t> depth{0};
  std::vector<int32_t> end{0}, owner{-1};  // owner: the token ending at the node, as it is built
  std::vector<int32_t> path{0};             // path[d]: the open node at depth d
  std::vector<std::pair<int32_t, int32_t>> ends;  // (node, id), in preorder
  std::string_view previous;
  for (int64_t k : sorted) {
    const std::string_view s = spelled(k);
    if (s.size() > std::numeric_limits<uint16_t>::max()) throw std::invalid_argument("fence_trie: a token too long");
    size_t common = 0;
    while (common < s.size() && common < previous.size() && s[common] == previous[common]) ++common;
    for (size_t d = path.size() - 1; d > common; --d) end[path[d]] = static_cast<int32_t>(byte.size());
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<int32_t>(byte.size()));
      byte.push_back(static_cast<uint8_t>(s[d]));
      depth.push_back(static_cast<uint16_t>(d + 1));
      end.push_back(0);
    }
    ends.emplace_back(path.back(), tok.ids[k]);
    previous = s;
  }
  const int32_t nodes = static_cast<int32_t>(byte.size());
  for (size_t d = 0; d < path.size(); ++d) end[path[d]] = nodes;
  py::array_t<int32_t> ids_start(nodes + 1), ids(static_cast<py::ssize_t>(ends.size()));
  int32_t* starts = ids_start.mutable_data();
  int32_t* out = ids.mutable_data();
  std::fill(starts, starts + nodes + 1, 0);
  for (auto [node, id] : ends) ++starts[node + 1];
  std::partial_sum(starts, starts + nodes + 1, starts);
  for (size_t i = 0; i < ends.size(); ++i) out[i] = ends[i].second;  // preorder: already grouped
  auto to_array = [](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
  };
  return py::make_tuple(to_array(byte), to_array(depth), to_array(end), ids_start, ids);
}

// 1 for each token made only of bytes that loop (`ascii_loop`, 128 flags) and, with `utf8`,
// whole well-formed multi-byte characters: the tokens that return to a loop state.
py::array_t<uint8_t> fence_loop_tokens(const Array<uint8_t>& flat, const Array<int64_t>& offsets,
                                       const Array<int32_t>& order, const Array<uint8_t>& ascii_loop, bool utf8) {
  const Tokens tok = tokens_of(flat, offsets, order);
  if (ascii_loop.size() != 128) throw std::invalid_argument("fence_loop_tokens: ascii_loop [128]");
  const uint8_t* loop = ascii_loop.data();
  py::array_t<uint8_t> out(tok.n);
  uint8_t* r = out.mutable_data();
  for (int64_t k = 0; k < tok.n; ++k) {
    const uint8_t* p = tok.bytes + tok.off[k];
    const uint8_t* stop = tok.bytes + tok.off[k + 1];
    bool ok = p < stop;
    while (ok && p < stop) {
      const uint8_t c = *p;
      if (c < 0x80) {
        ok = loop[c] != 0;
        ++p;
        continue;
      }
      // One well-formed character: a lead byte, its continuation count and the first
      // continuation's range (which rules out overlong forms, surrogates and past U+10FFFF).
      int more = 0;
      uint8_t lo = 0x80, hi = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) more = 1;
      else if (c >= 0xE0 && c <= 0xEF) more = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      else if (c >= 0xF0 && c <= 0xF4) more = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      ok = utf8 && more > 0 && stop - p > more && p[1] >= lo && p[1] <= hi;
      for (int j = 2; ok && j <= more; ++j) ok = p[j] >= 0x80 && p[j] <= 0xBF;
      p += more + 1;
    }
    r[k] = ok ? 1 : 0;
  }
  return out;
}

// A trie's arrays as the walks read them (sizes checked; the layout itself is fence_trie's).
struct TrieView {
  const uint8_t* byte;
  const uint16_t* depth;
  const int32_t* end;
  const int32_t* first;  // ids_start
  const int32_t* id;
  int64_t nodes, num_ids;
};

TrieView trie_of(const Array<uint8_t>& byte, const Array<uint16_t>& depth, const Array<int32_t>& end,
                 const Array<int32_t>& ids_start, const Array<int32_t>& ids) {
  const int64_t nodes = byte.size();
  if (nodes < 1 || depth.size() != nodes || end.size() != nodes || ids_start.size() != nodes + 1 ||
      ids_start.data()[nodes] != ids.size()) {
    throw std::invalid_argument("fence: a trie is byte, depth, end [nodes], ids_start [nodes + 1] spanning ids");
  }
  return {byte.data(), depth.data(), end.data(), ids_start.data(), ids.data(), nodes, ids.size()};
}

// A sub-trie: the nodes on the paths of the kept tokens (keep[id] != 0), in the same preorder.
py::tuple fence_subtrie(const Array<uint8_t>& byte, const Array<uint16_t>& depth, const Array<int32_t>& end,
                        const Array<int32_t>& ids_start, const Array<int32_t>& ids, const Array<uint8_t>& keep) {
  const TrieView t = trie_of(byte, depth, end, ids_start, ids);
  const int64_t nodes = t.nodes;
  const int32_t* first = t.first;
  const int32_t* id = t.id;
  const uint8_t* k = keep.data();
  for (int64_t j = 0; j < t.num_ids; ++j) {
    if (id[j] < 0 || id[j] >= keep.size()) throw std::invalid_argument("fence_subtrie: keep does not cover the ids");
  }
  // A node stays when a kept token ends at it or below it: mark the ends, then each node's
  // parent, in reverse preorder (children come after their parent).
  std::vector<uint8_t> stays(nodes, 0);
  std::vector<int32_t> parent(nodes, 0), path(1, 0);
  const uint16_t* d = t.depth;
  for (int64_t i = 1; i < nodes; ++i) {
    path.resize(d[i]);
    parent[i] = path.back();
    path.push_back(static_cast<int32_t>(i));
    for (int32_t j = first[i]; j < first[i + 1]; ++j) stays[i] |= k[id[j]];
  }
  stays[0] = 1;
  for (int64_t i = nodes - 1; i > 0; --i) stays[parent[i]] |= stays[i];
  std::vector<int32_t> renumber(nodes + 1, 0);  // renumber[i]: staying nodes before i
  for (int64_t i = 0; i < nodes; ++i) renumber[i + 1] = renumber[i] + stays[i];
  const int32_t kept = renumber[nodes];
  py::array_t<uint8_t> out_byte(kept);
  py::array_t<uint16_t> out_depth(kept);
  py::array_t<int32_t> out_end(kept), out_start(kept + 1);
  std::vector<int32_t> out_ids;
  const uint8_t* b = t.byte;
  const int32_t* e = t.end;
  int32_t* os = out_start.mutable_data();
  for (int64_t i = 0, n = 0; i < nodes; ++i) {
    if (!stays[i]) continue;
    out_byte.mutable_data()[n] = b[i];
    out_depth.mutable_data()[n] = d[i];
    out_end.mutable_data()[n] = renumber[e[i]];
    os[n] = static_cast<int32_t>(out_ids.size());
    for (int32_t j = first[i]; j < first[i + 1]; ++j) {
      if (k[id[j]]) out_ids.push_back(id[j]);
    }
    ++n;
  }
  os[kept] = static_cast<int32_t>(out_ids.size());
  py::array_t<int32_t> ids_out(static_cast<py::ssize_t>(out_ids.size()));
  std::copy(out_ids.begin(), out_ids.end(), ids_out.mutable_data());
  return py::make_tuple(out_byte, out_depth, out_end, out_start, ids_out);
}

// `looping` (one packed row, or empty) holds tokens known to return to `start`; the trie
// holds every other token that may live.
py::tuple fence_row(const Array<int32_t>& table, const Array<uint8_t>& classes, const Array<int32_t>& distance,
                    int32_t start, int32_t limit, const Array<uint8_t>& byte, const Array<uint16_t>& depth,
                    const Array<int32_t>& end, const Array<int32_t>& ids_start, const Array<int32_t>& ids,
                    int64_t vocab_size, const Array<int32_t>& looping) {
  const Dfa dfa = dfa_of(table, classes, distance, start);
  const TrieView t = trie_of(byte, depth, end, ids_start, ids);
  const uint8_t* b = t.byte;
  const uint16_t* d = t.depth;
  const int32_t* e = t.end;
  const int32_t* first = t.first;
  const int32_t* id = t.id;
  const int64_t nodes = t.nodes;
  Row row(vocab_size);
  if (looping.size() != 0 && looping.size() != row.width) throw std::invalid_argument("fence_row: looping is not one row");
  {
    py::gil_scoped_release released;
    const uint32_t* base = reinterpret_cast<const uint32_t*>(looping.data());
    bool loops = false;
    for (int64_t w = 0; w < looping.size(); ++w) loops |= base[w] != 0;
    if (loops) {
      row.closest = dfa.dist[start];
      if (dfa.dist[start] <= limit) std::memcpy(row.bits, base, sizeof(uint32_t) * row.width);
    }
    std::vector<int32_t> at(256, start);  // at[k]: the state after the path's first k bytes
    for (int64_t i = 1; i < nodes;) {
      const uint16_t k = d[i];
      const int32_t s = dfa.next(at[k - 1], b[i]);
      if (s == dfa.dead) {
        i = e[i];
        continue;
      }
      if (at.size() <= k) at.resize(k + 1);
      at[k] = s;
      for (int32_t j = first[i]; j < first[i + 1]; ++j) row.live(id[j], dfa.dist[s], limit);
      ++i;
    }
  }
  return py::make_tuple(row.words, row.closest);
}

}  // namespace

void register_fence_walk(py::module_& m) {
  m.def("fence_trie", &fence_trie, py::arg("flat"), py::arg("offsets"), py::arg("order"), py::arg("vocab_size"),
        "The tokens' byte trie in preorder: (byte, depth, end, ids_start, ids).");
  m.def("fence_subtrie", &fence_subtrie, py::arg("byte"), py::arg("depth"), py::arg("end"), py::arg("ids_start"),
        py::arg("ids"), py::arg("keep"), "The trie of the tokens with keep[id] != 0, in the same layout.");
  m.def("fence_loop_tokens", &fence_loop_tokens, py::arg("flat"), py::arg("offsets"), py::arg("order"),
        py::arg("ascii_loop"), py::arg("utf8"),
        "1 per token made only of looping ASCII bytes and (with utf8) whole well-formed characters.");
  m.def("fence_row", &fence_row, py::arg("table"), py::arg("classes"), py::arg("distance"), py::arg("start"),
        py::arg("limit"), py::arg("byte"), py::arg("depth"), py::arg("end"), py::arg("ids_start"), py::arg("ids"),
        py::arg("vocab_size"), py::arg("looping"),
        "(packed row of the tokens that live from start within limit bytes of acceptance, the fewest "
        "bytes any living token leaves or -1): the looping row (tokens that return to start, or "
        "empty) and a walk of the trie. The last table row is the dead state.");
}

}  // namespace zllm
