// The exported prefix state's format (see state_blob.h).
#include "cache/state_blob.h"

#include <bit>
#include <cstring>

#include "core/crc32c.h"

namespace dsinfer::cache {

namespace {

static_assert(std::endian::native == std::endian::little, "the state blob is written in host byte order");

constexpr char kMagic[4] = {'D', 'S', 'I', 'S'};
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 4 * 8;
constexpr int64_t kMaxBlobBytes = int64_t(1) << 46;

void put(std::string& s, size_t at, const void* v, size_t n) { std::memcpy(s.data() + at, v, n); }
template <class T>
T get(std::string_view s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof v);
  return v;
}

}  // namespace

int64_t state_blob_bytes(const StateBlobHeader& h) {
  if (h.block_size <= 0 || h.block_bytes <= 0 || h.slot_bytes <= 0 || h.num_tokens <= 0) return -1;
  if (h.num_tokens % h.block_size != 0) return -1;
  if (h.block_bytes > kMaxBlobBytes || h.slot_bytes > kMaxBlobBytes || h.num_tokens > kMaxBlobBytes / 4) return -1;
  const int64_t blocks = h.num_blocks();
  if (blocks > kMaxBlobBytes / h.block_bytes) return -1;
  const int64_t total = int64_t(kHeaderBytes) + 4 * h.num_tokens + blocks * h.block_bytes + h.slot_bytes + 4;
  return total > kMaxBlobBytes ? -1 : total;
}

Result<StateBlobPayload> begin_state_blob(const StateBlobHeader& h, std::span<const int32_t> tokens, std::string& out) {
  const int64_t total = state_blob_bytes(h);
  if (total < 0)
    return Status::errorf("state blob: invalid header (block_size {}, block_bytes {}, slot_bytes {}, {} tokens)",
                          h.block_size, h.block_bytes, h.slot_bytes, h.num_tokens);
  if (int64_t(tokens.size()) != h.num_tokens)
    return Status::errorf("state blob: {} token ids for a {}-token header", tokens.size(), h.num_tokens);
  out.assign(size_t(total), '\0');
  put(out, 0, kMagic, 4);
  const uint32_t version = kStateBlobVersion;
  put(out, 4, &version, 4);
  put(out, 8, &h.identity, 8);
  const int64_t fields[4] = {h.block_size, h.block_bytes, h.slot_bytes, h.num_tokens};
  put(out, 16, fields, sizeof fields);
  put(out, kHeaderBytes, tokens.data(), tokens.size_bytes());
  StateBlobPayload p;
  p.blocks_offset = kHeaderBytes + tokens.size_bytes();
  p.snapshot_offset = p.blocks_offset + size_t(h.num_blocks() * h.block_bytes);
  return p;
}

void seal_state_blob(std::string& blob) {
  if (blob.size() < 4) return;
  const uint32_t crc = crc32c(std::string_view(blob.data(), blob.size() - 4));
  put(blob, blob.size() - 4, &crc, 4);
}

Result<StateBlobView> parse_state_blob(std::string_view blob) {
  if (blob.size() < kHeaderBytes + 4)
    return Status::errorf("state blob: {} bytes is shorter than its {}-byte header", blob.size(), kHeaderBytes + 4);
  if (std::memcmp(blob.data(), kMagic, 4) != 0) return Status::error("state blob: bad magic (not a dsinfer state blob)");
  const uint32_t version = get<uint32_t>(blob, 4);
  if (version != kStateBlobVersion)
    return Status::errorf("state blob: version {} (this engine reads version {})", version, kStateBlobVersion);
  StateBlobView v;
  v.header.identity = get<uint64_t>(blob, 8);
  v.header.block_size = get<int64_t>(blob, 16);
  v.header.block_bytes = get<int64_t>(blob, 24);
  v.header.slot_bytes = get<int64_t>(blob, 32);
  v.header.num_tokens = get<int64_t>(blob, 40);
  const StateBlobHeader& h = v.header;
  const int64_t total = state_blob_bytes(h);
  if (total < 0)
    return Status::errorf("state blob: invalid header (block_size {}, block_bytes {}, slot_bytes {}, {} tokens)",
                          h.block_size, h.block_bytes, h.slot_bytes, h.num_tokens);
  if (total != int64_t(blob.size()))
    return Status::errorf("state blob: {} bytes, its header says {} (truncated or padded)", blob.size(), total);
  const uint32_t crc = crc32c(blob.substr(0, blob.size() - 4));
  if (crc != get<uint32_t>(blob, blob.size() - 4))
    return Status::errorf("state blob: checksum mismatch (computed {:08x}, stored {:08x})", crc,
                          get<uint32_t>(blob, blob.size() - 4));
  v.tokens.resize(size_t(h.num_tokens));
  std::memcpy(v.tokens.data(), blob.data() + kHeaderBytes, v.tokens.size() * 4);
  const size_t blocks_at = kHeaderBytes + v.tokens.size() * 4;
  v.blocks = blob.substr(blocks_at, size_t(h.num_blocks() * h.block_bytes));
  v.snapshot = blob.substr(blocks_at + v.blocks.size(), size_t(h.slot_bytes));
  return v;
}

}  // namespace dsinfer::cache
