// Issue 36 (hostile input, round 3) through the built binary: `generate --resume` after the input changed reruns
// the changed lines; `--output` naming the input file (also through a symbolic or hard link) is refused; hostile
// model directories (nonsense config values, NaN weights, FIFOs, paths leading out) are clear errors.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "cli_test_util.h"

namespace dsinfer::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTiny = own_fixture("tiny-v4-c");

std::string line(const std::string& id, int max_tokens, const std::string& prompt = "[5, 6, 7]") {
  return fmt::format(R"({{"custom_id": "{}", "body": {{"prompt": {}, "max_tokens": {}, "temperature": 0}}}})", id,
                     prompt, max_tokens);
}

std::map<std::string, json> by_id(const std::string& path) {
  std::map<std::string, json> m;
  for (const json& j : read_jsonl(path)) m[j["custom_id"].get<std::string>()] = j;
  return m;
}

int64_t completion_tokens(const json& rec) {
  return rec["response"]["body"]["usage"]["completion_tokens"].get<int64_t>();
}

// Before the fix a changed line under the same custom_id silently kept its old record ("resumed").
TEST(CliHostile, ResumeRerunsLinesWhoseRequestChanged) {
  ScratchDir d("resume_changed");
  const std::string in = d.str() + "/in.jsonl", out = d.str() + "/out.jsonl";
  std::ofstream(in) << line("a", 2) << "\n" << line("b", 2) << "\n" << line("c", 2) << "\n";
  const std::string cmd = "generate --model " + kTiny + " --input " + in + " --output " + out;
  CliResult r = run_cli(d, cmd);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto first = by_id(out);
  for (const auto& [id, rec] : first) EXPECT_EQ(rec["request_fingerprint"].get<std::string>().size(), 16u) << id;
  const std::string first_a = read_jsonl(out)[0].dump();

  // "a" only reformatted (same request: reused), "b" has a new max_tokens, "c" a new prompt, "d" is new.
  std::ofstream(in) << R"({"body": {"temperature": 0, "max_tokens": 2, "prompt": [5,6,7]}, "custom_id": "a"})"
                    << "\n"
                    << line("b", 4) << "\n"
                    << line("c", 2, "[9, 9]") << "\n"
                    << line("d", 1) << "\n";
  r = run_cli(d, cmd + " --resume");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("resume: 1 records reused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resume: 2 lines changed since the earlier run"), std::string::npos) << r.err;
  const auto second = by_id(out);
  ASSERT_EQ(second.size(), 4u);
  EXPECT_EQ(read_jsonl(out)[0].dump(), first_a);  // reused byte for byte
  EXPECT_EQ(completion_tokens(second.at("b")), 4);
  EXPECT_EQ(second.at("c")["response"]["body"]["usage"]["prompt_tokens"], 2);
  EXPECT_NE(second.at("c")["request_fingerprint"], first.at("c")["request_fingerprint"]);
  EXPECT_EQ(completion_tokens(second.at("d")), 1);

  // A record without a fingerprint (an older dsinfer's output) cannot be matched to its request: run again.
  std::ofstream(out) << R"({"id":"batch_req_1","custom_id":"a","response":{"status_code":200,"body":{}},"error":null})"
                     << "\n";
  r = run_cli(d, cmd + " --resume");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("records reused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resume: 1 lines changed"), std::string::npos) << r.err;
  EXPECT_EQ(completion_tokens(by_id(out).at("a")), 2);
}

// Before the fix `--output` equal to `--input` overwrote the requests with the results.
TEST(CliHostile, OutputThatIsTheInputIsRefused) {
  ScratchDir d("same_file");
  const std::string in = d.str() + "/in.jsonl";
  const std::string body = line("a", 2) + "\n";
  std::ofstream(in) << body;
  fs::create_symlink(in, d.str() + "/sym.jsonl");
  fs::create_hard_link(in, d.str() + "/hard.jsonl");
  fs::create_directory(d.str() + "/sub");
  struct Case {
    std::string input, output, want;
  };
  for (const Case& c : std::vector<Case>{
           {in, in, "is the input file " + in + " (the same file)"},
           {in, d.str() + "/sub/../in.jsonl", "(the same file through a link)"},
           {in, d.str() + "/sym.jsonl", "(the same file through a link)"},
           {in, d.str() + "/hard.jsonl", "(the same file through a link)"},
           {d.str() + "/sym.jsonl", in, "(the same file through a link)"},
       }) {
    // The model is not even looked at: the check comes first.
    CliResult r = run_cli(d, "generate --model /nonexistent --input " + c.input + " --output " + c.output);
    EXPECT_EQ(r.rc, 2) << c.output;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("choose another output path"), std::string::npos) << r.err;
    EXPECT_EQ(slurp(in), body);
  }
  // The input named as the output's partial file is refused as well, and with --resume.
  fs::rename(in, d.str() + "/o.jsonl.partial");
  CliResult r = run_cli(d, "generate --model " + kTiny + " --resume --input " + d.str() + "/o.jsonl.partial --output " +
                               d.str() + "/o.jsonl");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("which is the input file"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(d.str() + "/o.jsonl.partial"), body);
}

// A copy of a model directory (its files copied, so they can be edited) in `d`/name.
std::string copy_model(const ScratchDir& d, const std::string& from, const std::string& name) {
  const std::string dir = d.str() + "/" + name;
  fs::copy(from, dir, fs::copy_options::recursive);
  return dir;
}

void edit_config(const std::string& dir, const std::function<void(json&)>& f) {
  json j = json::parse(slurp(dir + "/config.json"));
  f(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
}

// Writes `value` over element `index` of the F32 tensor `name` in dir/model.safetensors.
void poke_f32(const std::string& dir, const std::string& name, int64_t index, float value) {
  std::string bytes = slurp(dir + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json h = json::parse(bytes.substr(8, n));
  ASSERT_EQ(h.at(name).at("dtype"), "F32");
  const size_t off = 8 + n + h.at(name).at("data_offsets")[0].get<size_t>() + size_t(index) * 4;
  std::memcpy(bytes.data() + off, &value, 4);
  std::ofstream(dir + "/model.safetensors", std::ios::binary) << bytes;
}

struct ModelRun {
  const ScratchDir& d;
  std::string in;
  explicit ModelRun(const ScratchDir& dir) : d(dir), in(dir.str() + "/req.jsonl") {
    std::ofstream(in) << line("a", 2) << "\n";
  }
  // generate on `model` (bounded by `timeout`: a FIFO must not hang the test).
  CliResult operator()(const std::string& model, const std::string& flags = "") const {
    return run_cli(d, "generate --model " + model + " --input " + in + " --output " + d.str() + "/out.jsonl " + flags);
  }
};

void expect_error(const CliResult& r, const std::vector<std::string>& wants) {
  EXPECT_EQ(r.rc, 2) << r.err;
  for (const std::string& w : wants) EXPECT_NE(r.err.find(w), std::string::npos) << "want '" << w << "' in:\n" << r.err;
}

// Before the fix max_position_embeddings 0 was accepted (max_model_len became 8192, above the model's limit),
// and eps / scaling factors of any sign went through.
TEST(CliHostile, NonsenseConfigValuesAreRefusedNamingFileAndField) {
  ScratchDir d("bad_config");
  const ModelRun run(d);
  struct Case {
    const char* key;
    json value;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {"max_position_embeddings", 0, "'max_position_embeddings' must be in [1, "},
           {"max_position_embeddings", -5, "'max_position_embeddings' must be in [1, "},
           {"rms_norm_eps", 0.0, "'rms_norm_eps' must be in (0, 1]"},
           {"rms_norm_eps", -1e-6, "'rms_norm_eps' must be in (0, 1]"},
           {"hc_eps", 2.0, "'hc_eps' must be in (0, 1]"},
           {"routed_scaling_factor", 0, "'routed_scaling_factor' must be in (0, "},
           {"swiglu_limit", -1, "'swiglu_limit' must be in [0, "},
           {"partial_rotary_factor", 1.5, "'partial_rotary_factor' must be in [0, 1]"},
       }) {
    const std::string dir = copy_model(d, kTiny, "m");
    edit_config(dir, [&](json& j) { j[c.key] = c.value; });
    expect_error(run(dir), {dir + "/config.json", c.want});
    fs::remove_all(dir);
  }
  // A max_model_len above the model's limit is refused (the limit of tiny-v4-c is 4096).
  expect_error(run(kTiny, "--max-model-len 4097"),
               {"max_model_len 4097 exceeds the model's max_position_embeddings 4096"});
}

// Before the fix a NaN routing bias loaded silently.
TEST(CliHostile, NanOrInfInVectorsAndScalesIsNamed) {
  ScratchDir d("nan_weights");
  const ModelRun run(d);
  for (const auto& [tensor, value] : std::vector<std::pair<std::string, float>>{
           {"model.layers.1.ffn.gate.bias", std::nanf("")},
           {"model.layers.0.attn_norm.weight", INFINITY},
           {"model.layers.0.hc_attn_scale", -INFINITY},
       }) {
    const std::string dir = copy_model(d, kTiny, "m");
    poke_f32(dir, tensor, 1, value);
    expect_error(run(dir), {"tensor '" + tensor + "'", "element 1 is not a finite number"});
    fs::remove_all(dir);
  }
}

// Runs `dsinfer generate` on `model` under `timeout 60`: a hang shows as rc 124 instead of a stuck test.
CliResult run_bounded(const ScratchDir& d, const ModelRun& run, const std::string& model,
                      const std::string& flags = "") {
  const std::string err = d.str() + "/bounded.err";
  const int st = std::system(("timeout 60 " + std::string(binary()) + " generate --model " + model + " --input " +
                              run.in + " --output " + d.str() + "/o.jsonl " + flags + " >/dev/null 2>" + err)
                                 .c_str());
  CliResult r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.err = slurp(err);
  return r;
}

// Before the fix a FIFO in place of model.safetensors blocked generate forever.
TEST(CliHostile, FifoOrDirectoryInPlaceOfAModelFileIsAnError) {
  ScratchDir d("fifo");
  const ModelRun run(d);
  for (const std::string file : {"model.safetensors", "config.json", "model.safetensors.index.json"}) {
    const std::string dir = copy_model(d, kTiny, "m");
    fs::remove(dir + "/" + file);
    ASSERT_EQ(mkfifo((dir + "/" + file).c_str(), 0644), 0);
    expect_error(run_bounded(d, run, dir),
                 {dir + "/" + file + " is a FIFO (named pipe): a model file must be a regular file"});
    fs::remove_all(dir);
  }
  const std::string dir = copy_model(d, kTiny, "m");
  fs::remove(dir + "/model.safetensors");
  fs::create_directory(dir + "/model.safetensors");
  expect_error(run_bounded(d, run, dir), {dir + "/model.safetensors is a directory"});
}

// Before the fix index.json shard names and mtp1_file were opened as given (/etc/passwd was opened).
TEST(CliHostile, PathsInAModelDirectoryStayInside) {
  ScratchDir d("escape");
  const ModelRun run(d);
  const std::string outside = d.str() + "/outside.safetensors";
  fs::copy_file(kTiny + "/model.safetensors", outside);
  struct Case {
    std::string shard, want;
  };
  for (const Case& c : std::vector<Case>{
           {"../outside.safetensors", "has a \"..\" component"},
           {"sub/../../outside.safetensors", "has a \"..\" component"},
           {outside, "is an absolute path"},
           {"/etc/passwd", "is an absolute path"},
           {"", "is empty"},
           {"link.safetensors", "leads outside the model directory"},
       }) {
    const std::string dir = copy_model(d, kTiny, "m");
    fs::rename(dir + "/model.safetensors", dir + "/shard.safetensors");
    fs::create_symlink(outside, dir + "/link.safetensors");
    json idx = {{"weight_map", {{"model.embed.weight", "shard.safetensors"}, {"model.norm.weight", c.shard}}}};
    std::ofstream(dir + "/model.safetensors.index.json") << idx.dump();
    expect_error(run(dir), {"model.safetensors.index.json: weight_map shard = \"" + c.shard + "\"", c.want});
    fs::remove_all(dir);
  }
  // A symbolic link in place of model.safetensors that leads out of the directory.
  const std::string dir = copy_model(d, kTiny, "m");
  fs::remove(dir + "/model.safetensors");
  fs::create_symlink(outside, dir + "/model.safetensors");
  expect_error(run(dir), {"weights file = \"model.safetensors\"", "leads outside the model directory"});
  fs::remove_all(dir);
  // mtp1_file (the MTP-1 drafter of the shipped model) may not leave the directory either.
  for (const Case& c : std::vector<Case>{{"../../../../etc/passwd", "has a \"..\" component"},
                                         {"/etc/passwd", "is an absolute path"}}) {
    const std::string m = copy_model(d, source_dir() + "/models/dsv4-small", "small");
    edit_config(m, [&](json& j) { j["mtp1_file"] = c.shard; });
    expect_error(run(m, "--speculative mtp1"), {"config.json: mtp1_file = \"" + c.shard + "\"", c.want});
    fs::remove_all(m);
  }
}

// `"parameters": {}` (the empty schema, accepted by OpenAI and vLLM) was rejected; it now renders exactly like a
// function without parameters, through render-chat and generate.
TEST(CliHostile, EmptyToolParametersAreAccepted) {
  ScratchDir d("empty_params");
  const std::string in = d.str() + "/in.jsonl";
  auto req = [](const std::string& id, const std::string& params) {
    return R"({"custom_id": ")" + id +
           R"(", "body": {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": )"
           R"("function", "function": {"name": "now")" +
           params + R"(}}], "max_tokens": 2, "temperature": 0}})";
  };
  std::ofstream(in) << req("empty", R"(, "parameters": {})") << "\n"
                    << req("absent", "") << "\n"
                    << req("strict", R"(, "parameters": {}, "strict": true)") << "\n"
                    << req("strict_absent", R"(, "strict": true)") << "\n";
  const std::string model = source_dir() + "/models/dsv4-small";
  CliResult r = run_cli(d, "render-chat --model " + model + " --input " + in);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::vector<json> recs;
  for (size_t p = 0, e; (e = r.out.find('\n', p)) != std::string::npos; p = e + 1)
    recs.push_back(json::parse(r.out.substr(p, e - p)));
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0]["prompt_token_ids"], recs[1]["prompt_token_ids"]);
  EXPECT_EQ(recs[2]["prompt_token_ids"], recs[3]["prompt_token_ids"]);
  r = run_cli(d, "generate --model " + model + " --input " + in + " --output " + d.str() + "/out.jsonl");
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const json& rec : read_jsonl(d.str() + "/out.jsonl")) EXPECT_TRUE(rec["error"].is_null()) << rec.dump();
}

// tokenize and generate read JSON strings by one rule: a lone UTF-16 surrogate escape is an error naming it.
TEST(CliHostile, LoneSurrogatesAreOneClearErrorEverywhere) {
  ScratchDir d("surrogates");
  const std::string model = source_dir() + "/models/dsv4-small";
  const std::string texts = d.str() + "/texts.jsonl", in = d.str() + "/in.jsonl";
  const std::vector<std::string> bad = {R"("a\ud800b")", R"("\udc00")", R"("\ud800\ud800")", R"("x\udbff")"};
  {
    std::ofstream t(texts), b(in);
    for (size_t i = 0; i < bad.size(); ++i) {
      t << bad[i] << "\n";
      b << R"({"custom_id": "s)" << i << R"(", "body": {"prompt": )" << bad[i] << R"(, "max_tokens": 1}})"
        << "\n";
    }
    t << R"("\ud83d\ude00")"
      << "\n";  // a proper pair is fine
  }
  CliResult r = run_cli(d, "tokenize --tokenizer " + model + "/tokenizer.json", texts);
  EXPECT_EQ(r.rc, 1);
  std::vector<json> tok;
  for (size_t p = 0, e; (e = r.out.find('\n', p)) != std::string::npos; p = e + 1)
    tok.push_back(json::parse(r.out.substr(p, e - p)));
  ASSERT_EQ(tok.size(), bad.size() + 1);
  EXPECT_TRUE(tok.back().is_array());
  r = run_cli(d, "generate --model " + model + " --input " + in + " --output " + d.str() + "/out.jsonl");
  EXPECT_EQ(r.rc, 1);
  const std::vector<json> gen = read_jsonl(d.str() + "/out.jsonl");
  ASSERT_EQ(gen.size(), bad.size());
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string t = tok[i]["error"], g = gen[i]["error"]["message"];
    EXPECT_NE(t.find("not valid JSON"), std::string::npos) << t;
    EXPECT_NE(t.find("surrogate"), std::string::npos) << t;
    EXPECT_NE(g.find("surrogate"), std::string::npos) << g;
    // The same parser message after the line prefix ("stdin line N: " / "line N: ").
    EXPECT_EQ(t.substr(t.find("surrogate")), g.substr(g.find("surrogate"))) << t << "\n" << g;
  }
}

}  // namespace
}  // namespace dsinfer::test
