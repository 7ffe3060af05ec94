// The prompt `dsinfer generate` runs for a chat request is the reference's: usage.prompt_tokens equals the id
// count of deepseek-recipe 0.2.0 for every conversation of tests/data/chat/requests.jsonl, and every request
// the reference rejects is an error record. The model is tests/fixtures/tiny-v4-c with its vocabulary rows
// (embedding, head, hash-routing table) tiled up to the V4 tokenizer's size, written to a scratch directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/unit/test_util.h"
#include "tests/unit/tokenizer_test_util.h"
#include "tests/build_paths.h"

namespace dsinfer {
namespace {

using ojson = nlohmann::ordered_json;
namespace tt = tokenizer::testing;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Copies the safetensors file `src` to `dst` with every tensor of `rows_of` (first dim = old vocab) tiled to
// `vocab` rows.
void widen_vocab(const std::string& src, const std::string& dst, int64_t old_vocab, int64_t vocab) {
  const std::string in = slurp(src);
  uint64_t hlen = 0;
  std::memcpy(&hlen, in.data(), 8);
  const ojson header = ojson::parse(in.substr(8, hlen));
  const char* data = in.data() + 8 + hlen;
  ojson out_header = ojson::object();
  std::string payload;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      out_header[it.key()] = it.value();
      continue;
    }
    ojson t = it.value();
    const size_t b = t["data_offsets"][0], e = t["data_offsets"][1];
    std::string bytes(data + b, e - b);
    const bool vocab_rows = it.key() == "head.weight" || it.key() == "model.embed_tokens.weight" ||
                            it.key().find("tid2eid") != std::string::npos;
    if (vocab_rows && t["shape"][0] == old_vocab) {
      const size_t row = bytes.size() / size_t(old_vocab);
      std::string wide;
      wide.reserve(row * size_t(vocab));
      for (int64_t r = 0; r < vocab; ++r) wide.append(bytes, size_t(r % old_vocab) * row, row);
      bytes = std::move(wide);
      t["shape"][0] = vocab;
    }
    t["data_offsets"] = {payload.size(), payload.size() + bytes.size()};
    payload += bytes;
    out_header[it.key()] = t;
  }
  std::string h = out_header.dump();
  while ((8 + h.size()) % 8) h += ' ';
  const uint64_t n = h.size();
  std::ofstream f(dst, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << h << payload;
}

TEST(ChatParity, GenerateUsesTheReferencePrompt) {
  std::string why;
  const tokenizer::Tokenizer* tok = tt::load_v4(&why);
  ASSERT_NE(tok, nullptr) << why;
  const std::string tok_path = tt::v4_path(&why);
  test::ScratchDir d("gen_parity");
  const std::string model = d.str() + "/model";
  std::filesystem::create_directories(model);
  ojson cfg = ojson::parse(slurp(test::own_fixture("tiny-v4-c") + "/config.json"));
  const int64_t old_vocab = cfg["vocab_size"];
  const int64_t vocab = int64_t(tok->vocab_size());
  cfg["vocab_size"] = vocab;
  std::ofstream(model + "/config.json") << cfg.dump(2);
  widen_vocab(test::own_fixture("tiny-v4-c") + "/model.safetensors", model + "/model.safetensors", old_vocab, vocab);

  // The golden requests, each asking for one greedy token (numbers keep their values through ordered_json).
  const auto lines = tt::read_lines(tt::source_dir() + "/tests/data/chat/requests.jsonl");
  const std::string in = d.str() + "/in.jsonl", out = d.str() + "/out.jsonl";
  {
    std::ofstream f(in);
    for (const auto& l : lines) {
      ojson j = ojson::parse(l);
      j["body"]["max_tokens"] = 1;
      j["body"]["temperature"] = 0;
      f << j.dump() << "\n";
    }
  }
  const std::string cmd = std::string(DSINFER_BINARY) + " generate --model " + model + " --tokenizer " + tok_path +
                          " --input " + in + " --output " + out + " 2>" + d.str() + "/err.txt";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1) << slurp(d.str() + "/err.txt");  // the rejected requests fail
  std::map<std::string, ojson> got;
  for (const auto& l : tt::read_lines(out)) {
    ojson r = ojson::parse(l);
    got[r["custom_id"].get<std::string>()] = r;
  }
  size_t rendered = 0, equal = 0, rejected = 0, rejected_both = 0;
  for (const auto& l : tt::read_lines(tt::source_dir() + "/tests/data/chat/expected.jsonl")) {
    const ojson want = ojson::parse(l);
    const std::string name = want["custom_id"];
    ASSERT_TRUE(got.count(name)) << name << " has no output record";
    const ojson& r = got[name];
    if (want.contains("error")) {
      ++rejected;
      EXPECT_FALSE(r["error"].is_null()) << name << ": deepseek-recipe rejects it (" << want["error"] << ")";
      rejected_both += !r["error"].is_null();
      continue;
    }
    ++rendered;
    ASSERT_TRUE(r["error"].is_null()) << name << ": " << r["error"].dump();
    const int64_t n = r["response"]["body"]["usage"]["prompt_tokens"];
    EXPECT_EQ(n, int64_t(want["ids"].size())) << name;
    equal += n == int64_t(want["ids"].size());
  }
  std::printf("[chat parity, generate] %zu / %zu usage.prompt_tokens equal to the reference id count; %zu / %zu rejections\n",
              equal, rendered, rejected_both, rejected);
  EXPECT_EQ(equal, rendered);
  EXPECT_EQ(rejected_both, rejected);
}

}  // namespace
}  // namespace dsinfer
