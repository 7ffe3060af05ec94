// Byte-level BPE model: initial symbols are the 256 byte tokens; merges are applied lowest rank first (leftmost
// on ties), the same order as HF tokenizers' BPE::merge_word. Repeated words hit a cache.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace dsinfer::tokenizer {

// Open-addressing map (left id, right id) -> (rank, merged id). Immutable after build.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~0ull;
  void build(size_t n_merges);
  // Returns false when the pair was already present (duplicate merges keep the first, lower rank).
  bool insert(int32_t a, int32_t b, uint32_t rank, int32_t merged);
  const Entry* find(int32_t a, int32_t b) const {
    uint64_t key = pack(a, b);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static size_t hash(uint64_t k) { return size_t((k * 0x9E3779B97F4A7C15ull) >> 20); }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
};

class BpeModel {
 public:
  // byte_ids[b]: id of the single-byte token for byte b, or -1 when the vocab lacks it (such bytes are
  // dropped, or become unk_id when unk_id >= 0, as HF BPE does without byte_fallback).
  BpeModel(std::array<int32_t, 256> byte_ids, MergeTable merges, int32_t unk_id);

  // Appends the ids of one pre-tokenized word (raw bytes). Not thread-safe (cache and scratch).
  void encode_word(std::string_view word, std::vector<int32_t>& out);

 private:
  struct StrHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  void merge(std::string_view word, std::vector<int32_t>& out);
  void merge_small(std::vector<int32_t>& out);
  void merge_heap(std::vector<int32_t>& out);

  std::array<int32_t, 256> byte_ids_;
  MergeTable merges_;
  int32_t unk_id_;
  std::unordered_map<std::string, std::vector<int32_t>, StrHash, std::equal_to<>> cache_;
  std::vector<int32_t> syms_;
  std::vector<uint32_t> ranks_;
  std::vector<int32_t> merged_;
};

}  // namespace dsinfer::tokenizer
