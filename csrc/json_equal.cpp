// Strict equality of parsed JSON values, for memos keyed by what a client resent.
//
// Python's == says 1 == 1.0 == True and {"a": 1, "b": 2} == {"b": 2, "a": 1}; a memo that
// trusted it would hand a request the validation and rendering of a different document
// (json.dumps writes those four differently, and tool-call arguments are rendered from
// such objects). Here two values are equal only when they would serialise to the same JSON
// text: same types, same float bits, same keys in the same order.
#include <pybind11/pybind11.h>

#include <cstring>

namespace py = pybind11;

namespace zllm {
namespace {

constexpr int kMaxDepth = 512;  // deeper documents are never called equal (a miss, not an error)

bool strictly_equal(PyObject* a, PyObject* b, int depth);

bool dicts_equal(PyObject* a, PyObject* b, int depth) {
  if (PyDict_GET_SIZE(a) != PyDict_GET_SIZE(b)) return false;
  Py_ssize_t pa = 0, pb = 0;
  PyObject *ka, *va, *kb, *vb;
  // Insertion order is part of the document: walk both in step.
  while (PyDict_Next(a, &pa, &ka, &va)) {
    if (!PyDict_Next(b, &pb, &kb, &vb)) return false;
    if (!strictly_equal(ka, kb, depth) || !strictly_equal(va, vb, depth)) return false;
  }
  return true;
}

bool lists_equal(PyObject* a, PyObject* b, int depth) {
  Py_ssize_t n = PyList_GET_SIZE(a);
  if (n != PyList_GET_SIZE(b)) return false;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!strictly_equal(PyList_GET_ITEM(a, i), PyList_GET_ITEM(b, i), depth)) return false;
  return true;
}

bool strictly_equal(PyObject* a, PyObject* b, int depth) {
  if (a == b) return true;
  if (Py_TYPE(a) != Py_TYPE(b) || depth >= kMaxDepth) return false;
  if (PyUnicode_CheckExact(a)) return PyUnicode_Compare(a, b) == 0;
  if (PyLong_CheckExact(a)) return PyObject_RichCompareBool(a, b, Py_EQ) == 1;
  if (PyFloat_CheckExact(a)) {
    double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
    return std::memcmp(&x, &y, sizeof x) == 0;  // 0.0 and -0.0 are different documents
  }
  if (PyDict_CheckExact(a)) return dicts_equal(a, b, depth + 1);
  if (PyList_CheckExact(a)) return lists_equal(a, b, depth + 1);
  return false;  // bool and None are singletons (equal only when identical); nothing else is JSON
}

// How many leading items of two lists are strictly equal.
size_t common_prefix(const py::list& a, const py::list& b) {
  size_t n = std::min(py::len(a), py::len(b));
  for (size_t i = 0; i < n; ++i)
    if (!strictly_equal(PyList_GET_ITEM(a.ptr(), i), PyList_GET_ITEM(b.ptr(), i), 0)) return i;
  return n;
}

}  // namespace

void register_json_equal(py::module_& m) {
  m.def("json_equal", [](py::handle a, py::handle b) { return strictly_equal(a.ptr(), b.ptr(), 0); },
        "Whether two parsed JSON values are the same document (types, float bits and key order).");
  m.def("json_common_prefix", &common_prefix, py::arg("a"), py::arg("b"),
        "How many leading items of two lists of parsed JSON values are the same documents.");
}

}  // namespace zllm
