// What a new user meets first (issue 37): --help on stdout for every command, `plan` with default flags,
// `render-chat --model` with token ids, `serve --host localhost / ::1`, bad flag values named with their flag, and
// a model directory's chat defaults (the shipped model: thinking off) with DeepSeek's tool_choice rule.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.h"
#include "dsinfer/chat.h"
#include "dsinfer/engine.h"
#include "test_server_util.h"
#include "test_util.h"

namespace dsinfer {
namespace {

using test::CliResult;
using test::run_cli;
using test::ScratchDir;

std::string shipped_model() { return test::source_dir() + "/models/dsv4-small"; }

TEST(FirstHour, HelpGoesToStdoutForEveryCommand) {
  ScratchDir d("help");
  const CliResult top = run_cli(d, "--help");
  ASSERT_EQ(top.rc, 0) << top.err;
  EXPECT_TRUE(top.err.empty()) << top.err;
  size_t commands = 0;
  for (const char* cmd : {"generate", "serve", "bench", "plan", "check-reference", "tokenize", "detokenize", "render-chat"}) {
    SCOPED_TRACE(cmd);
    EXPECT_NE(top.out.find(std::string("  ") + cmd + " "), std::string::npos) << top.out;
    const CliResult r = run_cli(d, std::string(cmd) + " --help");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("usage: dsinfer ") + cmd), std::string::npos) << "stdout: " << r.out;
    EXPECT_TRUE(r.err.empty()) << "stderr: " << r.err;
    ++commands;
  }
  EXPECT_EQ(commands, 8u);
  // A usage error still goes to stderr, with exit code 2.
  const CliResult bad = run_cli(d, "serve --no-such-flag 1");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--no-such-flag"), std::string::npos) << bad.err;
}

TEST(FirstHour, PlanWorksWithDefaultFlags) {
  ScratchDir d("plan_defaults");
  const CliResult r = run_cli(d, "plan --model " + shipped_model());
  ASSERT_EQ(r.rc, 0) << r.err;
  // The default context is the model's max_position_embeddings (4096 for the shipped model).
  EXPECT_NE(r.out.find("per 4096-token sequence (the model's maximum"), std::string::npos) << r.out;
  const CliResult given = run_cli(d, "plan --model " + shipped_model() + " --context 1024");
  ASSERT_EQ(given.rc, 0) << given.err;
  EXPECT_NE(given.out.find("per 1024-token sequence\n"), std::string::npos) << given.out;
  const CliResult over = run_cli(d, "plan --model " + shipped_model() + " --context 5000");
  EXPECT_EQ(over.rc, 1);
  EXPECT_NE(over.err.find("plan: context 5000 exceeds the model's max_position_embeddings 4096"), std::string::npos)
      << over.err;
  EXPECT_EQ(over.err.find("plan: plan:"), std::string::npos) << over.err;
}

TEST(FirstHour, BadFlagValuesNameTheFlagAndTheValue) {
  ScratchDir d("bad_flags");
  const std::string m = " --model " + shipped_model();
  struct Case {
    std::string args, flag, value;
  };
  const Case cases[] = {
      {"generate" + m + " --prompt hi --enable-prefix-caching sideways", "--enable-prefix-caching", "'sideways'"},
      {"serve" + m + " --enable-prefix-caching sideways", "--enable-prefix-caching", "'sideways'"},
      {"generate" + m + " --prompt ''", "--prompt", "''"},
      {"generate" + m + " --prompt hi --chat --thinking maybe", "--thinking", "'maybe'"},
      {"generate" + m + " --prompt hi --backend tpu", "--backend", "'tpu'"},
      {"generate" + m + " --prompt hi --sampling gpu", "--sampling", "'gpu'"},
      {"generate" + m + " --prompt hi --max-tokens 0", "--max-tokens", "'0'"},
      {"serve" + m + " --host no-such-host.invalid --port 0", "--host", "'no-such-host.invalid'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const CliResult r = run_cli(d, c.args);
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_NE(r.err.find(c.flag), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.value), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("usage:"), std::string::npos) << "a bad value is named, not answered with the usage: " << r.err;
  }
  // A bare --enable-prefix-caching before another flag still means exact.
  const CliResult bare = run_cli(d, "generate" + m + " --enable-prefix-caching --prompt 'def f(' --max-tokens 2");
  EXPECT_EQ(bare.rc, 0) << bare.err;
}

// render-chat --model DIR: token ids from DIR/tokenizer.json (they decode back to the prompt text), and the
// thinking default from DIR/chat_defaults.json.
TEST(FirstHour, RenderChatModelFillsTokenIdsAndUsesChatDefaults) {
  ScratchDir d("render_model");
  const std::string in = d.str() + "/in.jsonl";
  std::ofstream(in) << R"({"messages": [{"role": "user", "content": "Reverse a string in Python."}]})" << "\n"
                    << R"({"messages": [{"role": "user", "content": "Hi"}], "thinking": {"type": "enabled"}})" << "\n";
  const CliResult r = run_cli(d, "render-chat --model " + shipped_model() + " --input " + in);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<nlohmann::json> recs;
  std::stringstream ss(r.out);
  for (std::string l; std::getline(ss, l);) recs.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(recs.size(), 2u) << r.out;
  for (const auto& rec : recs) {
    ASSERT_TRUE(rec["prompt_token_ids"].is_array()) << rec.dump();
    ASSERT_FALSE(rec["prompt_token_ids"].empty());
    const std::string ids_file = d.str() + "/ids.jsonl";
    std::ofstream(ids_file) << rec["prompt_token_ids"].dump() << "\n";
    const CliResult text = run_cli(d, "detokenize --tokenizer " + shipped_model() + "/tokenizer.json", ids_file);
    ASSERT_EQ(text.rc, 0) << text.err;
    EXPECT_EQ(nlohmann::json::parse(text.out).get<std::string>(), rec["prompt"].get<std::string>());
  }
  const std::string p0 = recs[0]["prompt"], p1 = recs[1]["prompt"];
  EXPECT_TRUE(p0.ends_with("</think>")) << "the shipped model's default is thinking off: " << p0;
  EXPECT_TRUE(p1.ends_with("<think>")) << "an explicit \"thinking\" wins over the default: " << p1;
}

Request chat(const std::string& body) {
  Request r;
  std::string err;
  EXPECT_TRUE(parse_request(body, Endpoint::kChatCompletions, &r, &err)) << err;
  return r;
}

// chat_defaults.json through the public API: a bad file names itself and the field; the defaults decide the mode of
// requests that leave it open; tool_choice "required" follows DeepSeek's rule in the mode that results.
TEST(FirstHour, ModelChatDefaultsAndTheToolChoiceRule) {
  ScratchDir d("chat_defaults");
  const std::string dir = d.str();
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}])";
  const std::string required = R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required", )" + tools + "}";
  std::string err;
  // No chat_defaults.json: DeepSeek's API defaults (thinking on), under which "required" is rejected.
  Request r = chat(required);
  EXPECT_FALSE(apply_model_chat_defaults(dir, &r, &err));
  EXPECT_NE(err.find("thinking mode does not support tool_choice \"required\""), std::string::npos) << err;
  ChatPrompt p;
  EXPECT_FALSE(render_chat_text(chat(required), &p, &err)) << "rendering on its own applies the API defaults";
  // Explicit thinking on with "required" is rejected at parse time already.
  Request rejected;
  EXPECT_FALSE(parse_request(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required", )" + tools +
                                 R"(, "thinking": {"type": "enabled"}})",
                             Endpoint::kChatCompletions, &rejected, &err));
  EXPECT_NE(err.find("thinking mode does not support"), std::string::npos) << err;

  std::ofstream(dir + "/chat_defaults.json") << R"({"thinking": {"type": "disabled"}})";
  r = chat(required);
  ASSERT_TRUE(apply_model_chat_defaults(dir, &r, &err)) << err;
  ASSERT_TRUE(render_chat_text(r, &p, &err)) << err;
  EXPECT_NE(p.text.find("<｜Assistant｜></think>"), std::string::npos) << "non-thinking mode: " << p.text;
  Request plain = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(apply_model_chat_defaults(dir, &plain, &err)) << err;
  ASSERT_TRUE(render_chat_text(plain, &p, &err)) << err;
  EXPECT_TRUE(p.text.ends_with("</think>")) << p.text;

  std::ofstream(dir + "/chat_defaults.json") << R"({"reasoning_effort": "max"})";
  plain = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(apply_model_chat_defaults(dir, &plain, &err)) << err;
  ChatPrompt max_effort, high_effort;
  ASSERT_TRUE(render_chat_text(plain, &max_effort, &err)) << err;
  ASSERT_TRUE(render_chat_text(chat(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high"})"),
                               &high_effort, &err)) << err;
  EXPECT_TRUE(max_effort.text.ends_with("<think>")) << max_effort.text;
  EXPECT_NE(max_effort.text, high_effort.text) << "effort max renders its own preamble";

  for (const auto& [content, needle] : std::vector<std::pair<std::string, std::string>>{
           {"{not json", "not a JSON object"},
           {R"({"thinking": {"type": "sometimes"}})", "thinking.type"},
           {R"({"temperature": 0.5})", "unknown field \"temperature\""}}) {
    std::ofstream(dir + "/chat_defaults.json") << content;
    r = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
    EXPECT_FALSE(apply_model_chat_defaults(dir, &r, &err)) << content;
    EXPECT_NE(err.find("chat_defaults.json"), std::string::npos) << err;
    EXPECT_NE(err.find(needle), std::string::npos) << err;
    EngineOptions eo;
    eo.model_dir = dir;
    EXPECT_EQ(Engine::create(eo, &err), nullptr);
    EXPECT_NE(err.find("chat_defaults.json"), std::string::npos) << "the engine checks the file first: " << err;
  }
}

// The shipped model through the Engine: a chat that leaves thinking open answers with content (its default is off);
// "required" with a strict tool gives a tool call; an explicit thinking request still reasons.
TEST(FirstHour, ShippedModelChatsWithoutThinkingByDefault) {
  EngineOptions eo;
  eo.model_dir = shipped_model();
  eo.max_model_len = 1024;
  std::string err;
  auto engine = Engine::create(eo, &err);
  ASSERT_NE(engine, nullptr) << err;
  const std::string user = R"("messages": [{"role": "user", "content": "Write a Python function that adds two numbers."}])";
  const std::string tool = R"("tools": [{"type": "function", "function": {"name": "get_weather", "strict": true,
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"],
      "additionalProperties": false}}}])";
  const uint64_t plain = engine->submit("{" + user + R"(, "max_tokens": 24, "temperature": 0})", &err);
  ASSERT_NE(plain, 0u) << err;
  const uint64_t call = engine->submit("{" + user + ", " + tool + R"(, "tool_choice": "required", "max_tokens": 300, "temperature": 0})", &err);
  ASSERT_NE(call, 0u) << err;
  const uint64_t think = engine->submit("{" + user + R"(, "thinking": {"type": "enabled"}, "max_tokens": 8, "temperature": 0})", &err);
  ASSERT_NE(think, 0u) << err;
  std::map<uint64_t, RequestResult> done;
  while (engine->has_unfinished()) {
    ASSERT_TRUE(engine->step(&err)) << err;
    for (RequestResult& r : engine->take_finished()) done[r.id] = std::move(r);
  }
  ASSERT_EQ(done.size(), 3u);
  const Completion& a = done[plain].completions.at(0);
  EXPECT_FALSE(a.text.empty());
  EXPECT_TRUE(a.reasoning.empty()) << a.reasoning;
  const Completion& c = done[call].completions.at(0);
  ASSERT_FALSE(c.tool_calls.empty()) << "text: " << c.text << " finish: " << c.finish_reason;
  EXPECT_EQ(c.tool_calls[0].name, "get_weather");
  EXPECT_NE(c.tool_calls[0].arguments.find("\"city\""), std::string::npos) << c.tool_calls[0].arguments;
  EXPECT_FALSE(done[think].completions.at(0).reasoning.empty()) << "explicit thinking still reasons";
}

// `serve --host localhost` binds (resolving the name); an IPv6 address is printed in brackets.
struct ServeProcess {
  pid_t pid = -1;
  std::string log;
  ServeProcess(const ScratchDir& d, const std::string& host)
      : log(d.str() + "/serve_" + std::to_string(getpid()) + "_" + std::to_string(next()++) + ".log") {
    const std::string model = shipped_model();
    pid = fork();
    if (pid == 0) {
      std::freopen(log.c_str(), "w", stderr);
      std::freopen("/dev/null", "w", stdout);
      execl(test::binary(), test::binary(), "serve", "--model", model.c_str(), "--host", host.c_str(), "--port", "0",
            "--max-model-len", "256", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  // The URL printed, or "" when the server exited or did not print one in time (*why holds its log).
  std::string url(std::string* why) {
    for (int k = 0; k < 1200; ++k) {
      const std::string s = test::slurp(log);
      std::smatch m;
      if (std::regex_search(s, m, std::regex("listening on (http://\\S+)"))) return m[1];
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        *why = s;
        return "";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    *why = "no 'listening on' line in 60 s: " + test::slurp(log);
    return "";
  }
  int stop() {
    if (pid < 0) return -1;
    kill(pid, SIGINT);
    int st = 0;
    waitpid(pid, &st, 0);
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  ~ServeProcess() { stop(); }
  static int& next() {
    static int n = 0;
    return n;
  }
};

TEST(FirstHour, ServeTakesLocalhostAndBracketsIpv6) {
  ScratchDir d("serve_host");
  std::string why;
  {
    ServeProcess s(d, "localhost");
    const std::string url = s.url(&why);
    ASSERT_FALSE(url.empty()) << why;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(url, m, std::regex("http://localhost:(\\d+)"))) << url;
    const auto health = test::request(std::stoi(m[1]), "GET", "/health");  // localhost binds its IPv4 address
    EXPECT_EQ(health.status, 200) << health.body;
    EXPECT_EQ(s.stop(), 0);
  }
  ServeProcess s6(d, "::1");
  const std::string url6 = s6.url(&why);
  if (url6.empty() && why.find("::1") != std::string::npos &&
      (why.find("Cannot assign") != std::string::npos || why.find("not available") != std::string::npos ||
       why.find("not supported") != std::string::npos))
    GTEST_SKIP() << "no IPv6 loopback on this machine: " << why;
  ASSERT_FALSE(url6.empty()) << why;
  EXPECT_TRUE(std::regex_match(url6, std::regex("http://\\[::1\\]:\\d+"))) << url6;
  EXPECT_EQ(s6.stop(), 0);
}

// generate --prompt --chat --thinking on|off: on the shipped model the default is off (an answer, no reasoning).
TEST(FirstHour, GenerateChatThinkingFlag) {
  ScratchDir d("gen_thinking");
  const std::string base = "generate --model " + shipped_model() + " --prompt 'Write a Python function.' --chat --max-tokens 12";
  const CliResult def = run_cli(d, base);
  ASSERT_EQ(def.rc, 0) << def.err;
  EXPECT_EQ(def.out.find("[reasoning]"), std::string::npos) << def.out;
  EXPECT_GT(def.out.size(), 1u);
  const CliResult off = run_cli(d, base + " --thinking off");
  ASSERT_EQ(off.rc, 0) << off.err;
  EXPECT_EQ(off.out, def.out);
  const CliResult on = run_cli(d, base + " --thinking on");
  ASSERT_EQ(on.rc, 0) << on.err;
  EXPECT_EQ(on.out.rfind("[reasoning] ", 0), 0u) << on.out;
  const CliResult not_chat = run_cli(d, "generate --model " + shipped_model() + " --prompt x --thinking on");
  EXPECT_EQ(not_chat.rc, 2);
  EXPECT_NE(not_chat.err.find("--thinking"), std::string::npos) << not_chat.err;
}

}  // namespace
}  // namespace dsinfer
