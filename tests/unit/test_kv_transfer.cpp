// The P/D state transport (src/server/kv_transfer.h) on loopback: a blob round-trips intact in chunks, once;
// every failure (unknown or expired id, refused connection, a truncated answer, a flipped bit in a chunk or in the
// whole-blob checksum, a sender that never answers, an announced size over the limit) is a clean error naming the
// stage and never a partial blob. The wire layout is checked against bytes written out by hand from the header's
// description, and CRC-32C against its published check value.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "server/kv_transfer.h"

namespace {

namespace kt = dsinfer::server::kv_transfer;

std::string random_blob(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xFF);
  return s;
}

kt::TransferOptions fast_options() {
  kt::TransferOptions o;
  o.chunk_bytes = 64 << 10;
  o.io_timeout_s = 0.5;  // a stalled sender fails the fetch after this long without data
  o.total_timeout_s = 30;
  return o;
}

struct Fixture {
  kt::Sender sender{fast_options()};
  Fixture() {
    std::string err;
    EXPECT_TRUE(sender.start("127.0.0.1", 0, &err)) << err;
  }
};

TEST(KvTransfer, Crc32cCheckValue) {
  EXPECT_EQ(kt::crc32c("123456789"), 0xE3069283u);  // the CRC-32C catalogue's check value
  EXPECT_EQ(kt::crc32c(""), 0u);
  EXPECT_EQ(kt::crc32c("56789", kt::crc32c("1234")), 0xE3069283u);  // chained
}

TEST(KvTransfer, WireLayoutAsDocumented) {
  // "abc" in chunks of 2 bytes: header, then chunk 0 = "ab", chunk 1 = "c".
  std::string want = "DSKA";
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) want.push_back(char(v >> (8 * i)));
  };
  u32(1);
  u32(0);
  u32(3);
  u32(0);  // u64 blob bytes = 3
  u32(2);
  u32(2);
  u32(kt::crc32c("abc"));
  u32(0);
  u32(2);
  u32(kt::crc32c("ab"));
  want += "ab";
  u32(1);
  u32(1);
  u32(kt::crc32c("c"));
  want += "c";
  EXPECT_EQ(kt::encode_answer("abc", 2), want);
  EXPECT_EQ(kt::encode_request("id7"), std::string("DSKQ\x01\0\0\0\x03\0\0\0id7", 15));
}

TEST(KvTransfer, RoundTripOnceInChunks) {
  Fixture f;
  const std::string blob = random_blob((3 << 20) + 12345, 1);
  f.sender.offer("seq-1", blob, 60);
  EXPECT_EQ(f.sender.held(), 1u);
  const kt::FetchResult r = kt::fetch("127.0.0.1", f.sender.port(), "seq-1", fast_options());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.blob == blob);
  EXPECT_EQ(r.bytes_received, kt::encode_answer(blob, fast_options().chunk_bytes).size());
  EXPECT_EQ(f.sender.held(), 0u);  // a blob is handed over once
  const kt::FetchResult again = kt::fetch("127.0.0.1", f.sender.port(), "seq-1", fast_options());
  EXPECT_FALSE(again.ok);
  EXPECT_NE(again.error.find("holds no state 'seq-1'"), std::string::npos) << again.error;
  // An empty blob is a valid state too (zero chunks).
  f.sender.offer("empty", "", 60);
  const kt::FetchResult e = kt::fetch("127.0.0.1", f.sender.port(), "empty", fast_options());
  ASSERT_TRUE(e.ok) << e.error;
  EXPECT_TRUE(e.blob.empty());
}

TEST(KvTransfer, UnknownExpiredAndRefused) {
  Fixture f;
  EXPECT_NE(kt::fetch("127.0.0.1", f.sender.port(), "nope", fast_options()).error.find("holds no state"),
            std::string::npos);
  f.sender.offer("old", "x", 0);  // expired at once
  EXPECT_FALSE(kt::fetch("127.0.0.1", f.sender.port(), "old", fast_options()).ok);
  const int port = f.sender.port();
  f.sender.stop();
  const kt::FetchResult r = kt::fetch("127.0.0.1", port, "x", fast_options());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("connect to 127.0.0.1"), std::string::npos) << r.error;
  EXPECT_NE(kt::fetch("not-an-ip", 1, "x").error.find("not an IPv4 address"), std::string::npos);
}

TEST(KvTransfer, TruncatedAnswerIsAnError) {
  Fixture f;
  const std::string blob = random_blob(300000, 2);
  for (int64_t cut : {int64_t(10), int64_t(32), int64_t(32 + 12 + 1000), int64_t(200000)}) {
    f.sender.set_faults({cut, -1, false});
    f.sender.offer("t", blob, 60);
    const kt::FetchResult r = kt::fetch("127.0.0.1", f.sender.port(), "t", fast_options());
    EXPECT_FALSE(r.ok) << "cut at " << cut;
    EXPECT_TRUE(r.blob.empty());
    EXPECT_NE(r.error.find("closed after"), std::string::npos) << r.error;
    EXPECT_EQ(r.bytes_received, uint64_t(cut));
  }
}

TEST(KvTransfer, CorruptedBytesAreCaught) {
  Fixture f;
  const std::string blob = random_blob(200000, 3);
  // A bit flipped inside chunk 1's data; then one in the whole-blob checksum field of the header.
  const int64_t in_chunk1 = 32 + (12 + (64 << 10)) + 12 + 77;
  f.sender.set_faults({-1, in_chunk1, false});
  f.sender.offer("c", blob, 60);
  kt::FetchResult r = kt::fetch("127.0.0.1", f.sender.port(), "c", fast_options());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("chunk 1 of 4: checksum mismatch"), std::string::npos) << r.error;
  f.sender.set_faults({-1, 28, false});
  f.sender.offer("c", blob, 60);
  r = kt::fetch("127.0.0.1", f.sender.port(), "c", fast_options());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("whole-blob checksum mismatch"), std::string::npos) << r.error;
  // A corrupted length field: the chunk header disagrees with the announced layout.
  f.sender.set_faults({-1, 32 + 4, false});
  f.sender.offer("c", blob, 60);
  r = kt::fetch("127.0.0.1", f.sender.port(), "c", fast_options());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("chunk 0 of 4: header says"), std::string::npos) << r.error;
}

TEST(KvTransfer, StalledSenderTimesOut) {
  Fixture f;
  f.sender.set_faults({-1, -1, true});
  f.sender.offer("s", "state", 60);
  const kt::FetchResult r = kt::fetch("127.0.0.1", f.sender.port(), "s", fast_options());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("no data for"), std::string::npos) << r.error;
}

TEST(KvTransfer, OversizedAnnouncementRefused) {
  Fixture f;
  f.sender.offer("big", random_blob(5000, 4), 60);
  kt::TransferOptions o = fast_options();
  o.max_blob_bytes = 4096;
  const kt::FetchResult r = kt::fetch("127.0.0.1", f.sender.port(), "big", o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("announced 5000 bytes (at most 4096)"), std::string::npos) << r.error;
}

}  // namespace
