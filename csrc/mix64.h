// The 64-bit finaliser every native hash here ends with (MurmurHash3's fmix64): each input bit
// flips about half the output bits, so table slots and index keys spread evenly.
#pragma once

#include <cstdint>

namespace zllm {

inline uint64_t mix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

}  // namespace zllm
