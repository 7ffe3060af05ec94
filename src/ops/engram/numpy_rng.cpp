// numpy.random.default_rng(seed).integers(0, high, size, dtype=int64), bit for bit: SeedSequence entropy
// mixing (pool of 4 uint32 words), PCG64 (128-bit LCG, XSL-RR output) seeded with 4 generated uint64 words, and
// numpy's Lemire bounded integers (numpy/random/bit_generator.pyx, src/pcg64, src/distributions). The Engram
// hash multipliers are drawn this way, so any other stream would rehash the whole table.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/engram/engram.h"

namespace dsinfer::ops {

namespace {

using u128 = unsigned __int128;

constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixL = 0xca01f9dd, kMixR = 0x4973f715;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> 16;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixL * x - kMixR * y;
  r ^= r >> 16;
  return r;
}

// SeedSequence(seed).generate_state(8, uint32) for a non-negative integer seed.
std::array<uint32_t, 8> seed_sequence_state(uint64_t seed) {
  std::vector<uint32_t> entropy;
  if (seed == 0) entropy.push_back(0);
  for (uint64_t s = seed; s > 0; s >>= 32) entropy.push_back(uint32_t(s & 0xffffffffu));
  std::array<uint32_t, 4> pool{};
  uint32_t hc = kInitA;
  for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0u, hc);
  for (std::size_t src = 0; src < pool.size(); ++src)
    for (std::size_t dst = 0; dst < pool.size(); ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hc));
  for (std::size_t src = pool.size(); src < entropy.size(); ++src)
    for (std::size_t dst = 0; dst < pool.size(); ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src], hc));
  std::array<uint32_t, 8> out{};
  uint32_t hb = kInitB;
  for (std::size_t i = 0; i < out.size(); ++i) {
    uint32_t v = pool[i % pool.size()];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> 16;
    out[i] = v;
  }
  return out;
}

class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed) {
    const auto w = seed_sequence_state(seed);
    auto u64 = [&](int i) { return uint64_t(w[std::size_t(2 * i)]) | (uint64_t(w[std::size_t(2 * i + 1)]) << 32); };
    const u128 init = (u128(u64(0)) << 64) | u64(1), seq = (u128(u64(2)) << 64) | u64(3);
    state_ = 0;
    inc_ = (seq << 1) | 1;
    step();
    state_ += init;
    step();
  }
  uint64_t next64() {
    step();
    const uint64_t x = uint64_t(state_ >> 64) ^ uint64_t(state_);
    const unsigned rot = unsigned(state_ >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }
  uint32_t next32() {
    if (has32_) {
      has32_ = false;
      return hi32_;
    }
    const uint64_t v = next64();
    has32_ = true;
    hi32_ = uint32_t(v >> 32);
    return uint32_t(v & 0xffffffffu);
  }

 private:
  void step() {
    const u128 mult = (u128(2549297995355413924ULL) << 64) | 4865540595714422341ULL;
    state_ = state_ * mult + inc_;
  }
  u128 state_ = 0, inc_ = 0;
  bool has32_ = false;
  uint32_t hi32_ = 0;
};

uint64_t lemire64(Pcg64& g, uint64_t rng) {
  const uint64_t excl = rng + 1;
  u128 m = u128(g.next64()) * excl;
  uint64_t left = uint64_t(m);
  if (left < excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % excl;
    while (left < threshold) {
      m = u128(g.next64()) * excl;
      left = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

uint32_t lemire32(Pcg64& g, uint32_t rng) {
  const uint32_t excl = rng + 1;
  uint64_t m = uint64_t(g.next32()) * excl;
  uint32_t left = uint32_t(m);
  if (left < excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % excl;
    while (left < threshold) {
      m = uint64_t(g.next32()) * excl;
      left = uint32_t(m);
    }
  }
  return uint32_t(m >> 32);
}

}  // namespace

std::vector<int64_t> numpy_rng_integers(uint64_t seed, int64_t high, int64_t count) {
  Pcg64 g(seed);
  const uint64_t rng = uint64_t(high - 1);  // numpy draws from the closed interval [0, high - 1]
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) {
    if (rng == 0) out.push_back(0);
    else if (rng <= 0xffffffffu) out.push_back(rng == 0xffffffffu ? int64_t(g.next32()) : int64_t(lemire32(g, uint32_t(rng))));
    else out.push_back(int64_t(lemire64(g, rng)));
  }
  return out;
}

}  // namespace dsinfer::ops
