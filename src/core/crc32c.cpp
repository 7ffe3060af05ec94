// crc32c (see crc32c.h): a byte-at-a-time table.
#include "core/crc32c.h"

#include <array>

namespace dsinfer {

namespace {

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli polynomial
    t[i] = c;
  }
  return t;
}

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  static const std::array<uint32_t, 256> kTable = make_table();
  crc = ~crc;
  for (const char ch : data) crc = kTable[(crc ^ uint8_t(ch)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

}  // namespace dsinfer
