// Where a JSON request body's conversation items end, so a resent body is parsed only past
// what an earlier body already held (zllm_core/server/resent_body.py).
//
// The conversation is the body's largest top-level array (`messages`, `input`). Offsets are
// bytes. The scans trust nothing: on malformed input they return None or offsets the caller
// only uses after orjson has accepted the text they delimit. They do answer exactly for valid
// JSON, and say None (never guess) for what would make byte offsets ambiguous: a key spelled
// with an escape, or a top-level key given twice (orjson keeps the last value of a key).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

namespace py = pybind11;

namespace zllm {
namespace {

constexpr int kMaxDepth = 1024;

struct Cursor {
  const char* p;
  const char* end;

  bool done() const { return p >= end; }
  char peek() const { return *p; }
  void skip_ws() {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
  }
  bool eat(char c) {
    skip_ws();
    if (p < end && *p == c) { ++p; return true; }
    return false;
  }
};

// p at the opening quote; on success p is past the closing one. `escaped` tells whether the
// string holds a backslash (a key spelled with one is not compared byte for byte).
bool skip_string(Cursor& c, bool* escaped = nullptr) {
  const char* s = c.p + 1;
  bool any = false;
  while (true) {
    const void* q = std::memchr(s, '"', c.end - s);
    if (!q) return false;
    const char* quote = static_cast<const char*>(q);
    const char* b = quote;
    while (b > s && b[-1] == '\\') --b;
    if (escaped && std::memchr(s, '\\', quote - s)) any = true;
    s = quote + 1;
    if ((quote - b) % 2 == 0) break;  // an even run of backslashes escapes itself, not the quote
  }
  if (escaped) *escaped = any;
  c.p = s;
  return true;
}

bool skip_value(Cursor& c) {
  c.skip_ws();
  if (c.done()) return false;
  char first = c.peek();
  if (first == '"') return skip_string(c);
  if (first != '{' && first != '[') {  // a number or a literal: up to its delimiter
    const char* start = c.p;
    while (c.p < c.end && !std::strchr(",]} \n\r\t", *c.p)) ++c.p;
    return c.p > start;
  }
  int depth = 0;
  while (c.p < c.end) {
    char ch = *c.p;
    if (ch == '"') {
      if (!skip_string(c)) return false;
      continue;
    }
    if (ch == '{' || ch == '[') {
      if (++depth > kMaxDepth) return false;
    } else if (ch == '}' || ch == ']') {
      if (--depth == 0) { ++c.p; return true; }
    }
    ++c.p;
  }
  return false;
}

// Items from c.p (at least one) to the array's ']'; appends where each ends. p ends past the
// ']'. A ']' or ',' where an item should start is refused (skip_value reads no value there).
bool scan_rest(Cursor& c, std::vector<size_t>& ends, const char* base) {
  while (true) {
    if (!skip_value(c)) return false;
    ends.push_back(c.p - base);
    if (c.eat(']')) return true;
    if (!c.eat(',')) return false;
  }
}

// Items of the array whose '[' is at c.p; appends where each ends. p ends past the ']'.
bool scan_items(Cursor& c, std::vector<size_t>& ends, const char* base) {
  ++c.p;
  c.skip_ws();
  if (!c.done() && c.peek() == ']') { ++c.p; return true; }
  return scan_rest(c, ends, base);
}

struct Member {
  std::string_view key;
  bool array = false;
  size_t open = 0;
  size_t bytes = 0;
  std::vector<size_t> ends;
};

// The rest of a top-level object after `members`: each further key (none given twice, none
// spelled with an escape) and value, then the closing brace and the end of the text.
bool scan_members(Cursor& c, std::vector<Member>& members, bool first, const char* base) {
  while (true) {
    c.skip_ws();
    if (c.eat('}')) {
      c.skip_ws();
      return c.done();
    }
    if (!first && !c.eat(',')) return false;
    first = false;
    c.skip_ws();
    if (c.done() || c.peek() != '"') return false;
    const char* key_start = c.p + 1;
    bool escaped = false;
    if (!skip_string(c, &escaped) || escaped) return false;
    Member m;
    m.key = std::string_view(key_start, c.p - 1 - key_start);
    for (const Member& other : members)
      if (other.key == m.key) return false;
    if (!c.eat(':')) return false;
    c.skip_ws();
    const char* value = c.p;
    if (!c.done() && c.peek() == '[') {
      m.array = true;
      m.open = value - base;
      if (!scan_items(c, m.ends, base)) return false;
    } else if (!skip_value(c)) {
      return false;
    }
    m.bytes = c.p - value;
    members.push_back(std::move(m));
  }
}

std::string_view view(const py::bytes& b) {
  char* data;
  Py_ssize_t size;
  PyBytes_AsStringAndSize(b.ptr(), &data, &size);
  return {data, static_cast<size_t>(size)};
}

// The body's conversation: (its key, the offset of its '[', where each item ends), or None.
py::object conversation_items(const py::bytes& body) {
  std::string_view text = view(body);
  std::vector<Member> members;
  bool ok;
  {
    py::gil_scoped_release unlocked;
    Cursor c{text.data(), text.data() + text.size()};
    ok = c.eat('{') && scan_members(c, members, true, text.data());
  }
  const Member* best = nullptr;
  for (const Member& m : members)
    if (m.array && !m.ends.empty() && (!best || m.bytes > best->bytes)) best = &m;
  if (!ok || !best) return py::none();
  return py::make_tuple(py::str(best->key.data(), best->key.size()), best->open, best->ends);
}

// A body known to equal a scanned one up to `at`, the end of one of its conversation items:
// (where the items after it begin, where each ends), or None when the text from `at` is not
// ", item, ..." or "]" closing the array and then the object, or when a later top-level key
// repeats `key` (orjson would take that value instead) or is spelled with an escape.
py::object items_after(const py::bytes& body, size_t at, const std::string& key) {
  std::string_view text = view(body);
  if (at > text.size()) return py::none();
  std::vector<Member> members;
  std::vector<size_t> ends;
  size_t first = 0;
  bool ok = false;
  {
    py::gil_scoped_release unlocked;
    Cursor c{text.data() + at, text.data() + text.size()};
    members.push_back(Member{key});
    c.skip_ws();
    if (c.eat(',')) {
      c.skip_ws();
      first = c.p - text.data();
      ok = scan_rest(c, ends, text.data());  // the items after, as if the array opened before them
    } else if (!c.done() && c.peek() == ']') {
      first = c.p - text.data();
      ++c.p;
      ok = true;
    }
    ok = ok && scan_members(c, members, false, text.data());
  }
  if (!ok) return py::none();
  return py::make_tuple(first, ends);
}

// Leading bytes two texts share.
size_t common_bytes(const py::bytes& a, const py::bytes& b) {
  std::string_view x = view(a), y = view(b);
  size_t n = std::min(x.size(), y.size()), i = 0;
  constexpr size_t kStep = 4096;
  while (i + kStep <= n && std::memcmp(x.data() + i, y.data() + i, kStep) == 0) i += kStep;
  while (i < n && x[i] == y[i]) ++i;
  return i;
}

}  // namespace

void register_json_items(py::module_& m) {
  m.def("json_conversation_items", &conversation_items, py::arg("body"),
        "(key, offset of '[', item ends) of a JSON object's largest top-level array, or None.");
  m.def("json_items_after", &items_after, py::arg("body"), py::arg("at"), py::arg("key"),
        "(start of the items after offset `at`, their ends) in a body resending a scanned one.");
  m.def("common_bytes", &common_bytes, py::arg("a"), py::arg("b"), "Leading bytes a and b share.");
}

}  // namespace zllm
