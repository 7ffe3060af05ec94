// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator, so a draw is a pure function of (key, counter) — no state carried between steps or requests.
#pragma once
#include <array>
#include <cstdint>

namespace dsinfer::sampling {

using PhiloxBlock = std::array<uint32_t, 4>;

// Ten rounds with the published multipliers and Weyl key increments.
inline PhiloxBlock philox4x32_10(PhiloxBlock ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kM0) * ctr[0], p1 = uint64_t(kM1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1], uint32_t(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// Key of one sample stream: the request seed and the sample index (n > 1 gives each sample its own stream).
struct RngKey {
  uint64_t seed = 0;
  uint32_t sample_index = 0;
};

// Uniform double in [0, 1) for draw `step` (= number of tokens generated before this one) of a stream;
// `lane` separates independent draws within a step (0 = the token draw; later uses, e.g. speculative
// acceptance tests, take other lanes). 53 random bits, so 1.0 is never returned.
inline double philox_uniform(const RngKey& k, uint64_t step, uint32_t lane = 0) {
  PhiloxBlock out = philox4x32_10({uint32_t(step), uint32_t(step >> 32), k.sample_index, lane},
                                  {uint32_t(k.seed), uint32_t(k.seed >> 32)});
  uint64_t bits = (uint64_t(out[0]) << 32 | out[1]) >> 11;
  return double(bits) * 0x1.0p-53;
}

}  // namespace dsinfer::sampling
