// The V4.1 fixtures' tokenizer.json is a WordLevel model, which only the Engram vocabulary reads; an engine on them
// gets this byte-level BPE one for its detokenizer (test_v41_model.cpp, test_pd_transfer.cpp).
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace dsinfer::test {

// A byte-level BPE tokenizer.json covering the fixture's 512 ids (256 byte tokens, then plain placeholders).
inline std::string byte_tokenizer(const test::ScratchDir& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = direct ? b : next++;
    std::string u8 = cp < 0x80 ? std::string(1, char(cp))
                                : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    vocab[u8] = b;
  }
  for (int i = 256; i < 512; ++i) vocab["<t" + std::to_string(i) + ">"] = i;  // decodable, never encoded
  const nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                            {"decoder", {{"type", "ByteLevel"}}}};
  const std::string path = dir.str() + "/tokenizer.json";
  std::ofstream(path) << j.dump();
  return path;
}

}  // namespace dsinfer::test
