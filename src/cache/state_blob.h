// The exported state of one prompt prefix (P/D disaggregation, docs/fleet.md): what a prefill worker hands a decode
// worker so that the decoder's prefix cache holds the prefix exactly as if it had computed it. The bytes are the
// runner's own (StateLayout: the token blocks, then the slot snapshot), so nothing here describes the layout again;
// the header carries what must match for the bytes to mean the same on the importing engine.
//
// Format, version 1 (little-endian):
//   "DSIS", u32 version, u64 identity (the prefix cache's hash seed: config.json bytes, runner / numerics, state
//   layout), i64 block_size, i64 block_bytes, i64 slot_bytes, i64 num_tokens (a positive multiple of block_size);
//   num_tokens i32 token ids; num_tokens / block_size token blocks of block_bytes (compressed entries and indexer keys
//   of every layer, in table order); slot_bytes of slot snapshot at num_tokens (SWA rings, compressor frontiers with
//   their partial windows and overlap rows, V4.1's n-gram history); u32 CRC-32C of every byte before it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsinfer::cache {

inline constexpr uint32_t kStateBlobVersion = 1;

struct StateBlobHeader {
  uint64_t identity = 0;
  int64_t block_size = 0, block_bytes = 0, slot_bytes = 0;
  int64_t num_tokens = 0;
  int64_t num_blocks() const { return block_size > 0 ? num_tokens / block_size : 0; }
};

// The blob's size for this header (the prediction a transfer is measured against); -1 when the header is not
// valid (non-positive sizes, num_tokens not a multiple of block_size, or a size beyond 2^46 bytes).
int64_t state_blob_bytes(const StateBlobHeader& h);

// Where the payload goes in a blob begun by begin_state_blob.
struct StateBlobPayload {
  size_t blocks_offset = 0;    // num_blocks() * block_bytes
  size_t snapshot_offset = 0;  // slot_bytes
};
// Sizes `out` for the whole blob and writes the header and the token ids (tokens.size() == num_tokens); the caller
// fills the payload (the runner reads its state into it), then seal_state_blob writes the checksum.
Result<StateBlobPayload> begin_state_blob(const StateBlobHeader& h, std::span<const int32_t> tokens, std::string& out);
void seal_state_blob(std::string& blob);

struct StateBlobView {
  StateBlobHeader header;
  std::vector<int32_t> tokens;
  std::string_view blocks, snapshot;  // into the parsed blob
};
// Checks everything before any use: magic, version, sizes against the blob's length, the checksum. Errors name
// what is wrong ("state blob: ...").
Result<StateBlobView> parse_state_blob(std::string_view blob);

}  // namespace dsinfer::cache
