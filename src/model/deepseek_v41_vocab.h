// The Engram compressed vocabulary of DeepSeek-V4.1 (research/dsv41-architecture.md §2.2a): every token id maps
// to the dense index (in order of first appearance) of its normalised text, so tokens that normalise alike
// (" The", "the", "THE") hash alike. Derived from the model's tokenizer.json exactly as transformers'
// build_compressed_token_map: decode the single id (ByteLevel decoder or none), key = the byte-level spelling
// when the text holds U+FFFD, else NFKC -> NFD -> strip marks -> lowercase -> collapse [ \t\r\n]+ -> strip
// whitespace (a lone space survives), or the raw text when that is empty. Unicode tables come from ICU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config.h"

namespace dsinfer::model {

struct EngramVocab {
  std::vector<int64_t> token_map;  // token id -> compressed id
  int64_t size = 0;                // number of distinct compressed ids
};

// The normalisation above, on UTF-8 (exposed for tests).
std::string engram_normalize(const std::string& text);

// Reads tokenizer.json (WordLevel without decoder, or BPE / WordLevel with a ByteLevel decoder).
Result<EngramVocab> build_engram_vocab(const std::string& tokenizer_json_path);
// The model's Engram vocabulary (model_dir/tokenizer.json), checked against config.json: its compressed size is
// engram_compressed_vocab_size (the hash multipliers derive from it) and engram_pad_id is one of its tokens. Used by
// the CPU model and the CUDA forward alike.
Result<EngramVocab> load_engram_vocab(const io::ModelConfig& cfg, const std::string& model_dir);

}  // namespace dsinfer::model
