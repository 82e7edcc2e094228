// Chained block hashes for the prefix cache.
//
// key(block i) = H(key(block i-1) || scope || tokens of block i as int32 LE)
// The scope enters every block (not only the first) so a key can never be
// reused across scopes even if a chain is rebuilt from the middle.
#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "mix64.h"

namespace py = pybind11;

namespace zllm {
namespace {

// ---- SHA-256 (FIPS 180-4), the default: collisions must be infeasible because a
// collision hands one request another prompt's keys and values.
class Sha256 {
 public:
  Sha256() { reset(); }
  void reset() {
    static const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::memcpy(h_, init, sizeof(h_));
    len_ = 0;
    fill_ = 0;
  }
  void update(const uint8_t* p, size_t n) {
    len_ += n;
    while (n > 0) {
      size_t take = std::min(n, size_t(64) - fill_);
      std::memcpy(buf_ + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ == 64) {
        compress(buf_);
        fill_ = 0;
      }
    }
  }
  std::array<uint8_t, 32> digest() {
    uint64_t bits = len_ * 8;
    uint8_t pad = 0x80;
    update(&pad, 1);
    uint8_t zero = 0;
    while (fill_ != 56) update(&zero, 1);
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; ++i) lenbuf[i] = uint8_t(bits >> (56 - 8 * i));
    update(lenbuf, 8);
    std::array<uint8_t, 32> out{};
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j) out[4 * i + j] = uint8_t(h_[i] >> (24 - 8 * j));
    return out;
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void compress(const uint8_t* block) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(block[4 * i]) << 24 | uint32_t(block[4 * i + 1]) << 16 |
             uint32_t(block[4 * i + 2]) << 8 | uint32_t(block[4 * i + 3]);
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h_[0] += a; h_[1] += b; h_[2] += c; h_[3] += d; h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += h;
  }
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t fill_;
  uint64_t len_;
};

// ---- Fast 128-bit option: two independent multiply-xorshift lanes over 8-byte
// words with a final avalanche. Not cryptographic: for single-tenant deployments
// where hashing cost matters more than adversarial collisions.
std::array<uint8_t, 16> fast128(const uint8_t* p, size_t n) {
  uint64_t a = 0x9e3779b97f4a7c15ULL ^ n, b = 0xd6e8feb86659fd93ULL ^ (n << 1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    a = (a ^ w) * 0x87c37b91114253d5ULL; a = (a << 31) | (a >> 33);
    b = (b + w) * 0x4cf5ad432745937fULL; b = (b << 29) | (b >> 35); b ^= a;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  a = mix64(a ^ tail ^ 0x2545f4914f6cdd1dULL);
  b = mix64(b + tail + a);
  a = mix64(a + b);
  std::array<uint8_t, 16> out{};
  std::memcpy(out.data(), &a, 8);
  std::memcpy(out.data() + 8, &b, 8);
  return out;
}

// Hash every full block of `tokens`, chaining from `parent` (empty for the root).
py::list block_hashes(py::buffer tokens, int64_t block_size, py::bytes parent, py::bytes scope,
                      const std::string& algo) {
  py::buffer_info info = tokens.request();
  // The blocks are read straight from the caller's memory (a numpy array, no copy).
  if (info.ndim != 1 || info.itemsize != 4 || info.format.find_first_of("iIl") == std::string::npos ||
      (info.shape[0] > 1 && info.strides[0] != 4))
    throw std::invalid_argument("tokens must be a contiguous 1-D buffer of 4-byte ints");
  if (block_size <= 0) throw std::invalid_argument("block_size must be positive");
  if (algo != "sha256" && algo != "fast128") throw std::invalid_argument("algo must be 'sha256' or 'fast128'");
  const auto* toks = static_cast<const uint8_t*>(info.ptr);
  const int64_t n_blocks = info.shape[0] / block_size;
  std::string prev = parent;
  const std::string sc = scope;
  std::vector<std::string> keys;
  keys.reserve(n_blocks);
  {
    py::gil_scoped_release release;
    std::vector<uint8_t> msg;
    for (int64_t i = 0; i < n_blocks; ++i) {
      msg.assign(prev.begin(), prev.end());
      msg.insert(msg.end(), sc.begin(), sc.end());
      const uint8_t* blk = toks + i * block_size * 4;
      msg.insert(msg.end(), blk, blk + block_size * 4);
      if (algo == "sha256") {
        Sha256 h;
        h.update(msg.data(), msg.size());
        auto d = h.digest();
        prev.assign(reinterpret_cast<const char*>(d.data()), d.size());
      } else {
        auto d = fast128(msg.data(), msg.size());
        prev.assign(reinterpret_cast<const char*>(d.data()), d.size());
      }
      keys.push_back(prev);
    }
  }
  py::list out;
  for (auto& k : keys) out.append(py::bytes(k));
  return out;
}

}  // namespace

void register_block_hash(py::module_& m) {
  m.def("block_hashes", &block_hashes, py::arg("tokens"), py::arg("block_size"), py::arg("parent"),
        py::arg("scope"), py::arg("algo") = "sha256",
        "Chained hashes of every full block: H(parent || scope || int32 tokens).");
}

}  // namespace zllm
