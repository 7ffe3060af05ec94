// Test helpers for the HTTP server: a loopback client with deadlines on every wait (raw socket, responses
// parsed by Beast's parser), SSE splitting, and folding a stream of chunks into the non-streaming shape.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace dsinfer::test {

struct HttpResponse {
  int status = 0;  // 0: no complete response (timeout / closed)
  std::map<std::string, std::string> headers;
  std::string body;
};

class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) close();
  }
  ~Client() { close(); }
  bool connected() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send_raw(const std::string& data) {
    size_t off = 0;
    while (fd_ >= 0 && off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return off == data.size();
  }
  bool send(const std::string& method, const std::string& target, const std::string& body,
            const std::map<std::string, std::string>& headers = {}) {
    std::string r = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (const auto& [k, v] : headers) r += k + ": " + v + "\r\n";
    if (!body.empty() || method == "POST") r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    return send_raw(r + "\r\n" + body);
  }
  // Reads one response; `until` (if set) is called with the body so far and may stop the read early: the
  // response is then incomplete (status and the body so far), and the next read() continues it.
  HttpResponse read(double timeout_s = 120, const std::function<bool(const std::string&)>& until = nullptr) {
    namespace http = boost::beast::http;
    if (!p_) {
      p_ = std::make_unique<http::response_parser<http::string_body>>();
      p_->eager(true);
      p_->body_limit(64u << 20);
    }
    auto& p = *p_;
    HttpResponse out;
    const auto t0 = std::chrono::steady_clock::now();
    auto finish = [&](bool done) {
      if (p.is_header_done()) {
        out.status = int(p.get().result_int());
        for (const auto& f : p.get()) out.headers[std::string(f.name_string())] = std::string(f.value());
        out.body = p.get().body();
      }
      if (done) p_.reset();
      return out;
    };
    while (fd_ >= 0) {
      while (!buf_.empty() && !p.is_done()) {
        boost::beast::error_code ec;
        const size_t used = p.put(boost::asio::buffer(buf_), ec);
        buf_.erase(0, used);
        if (ec == http::error::need_more) break;
        if (ec) return finish(true);
        if (used == 0) break;
      }
      if (p.is_done()) return finish(true);
      if (until && p.is_header_done() && until(p.get().body())) return finish(false);
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return HttpResponse{};
      pollfd pf{fd_, POLLIN, 0};
      if (::poll(&pf, 1, 50) <= 0) continue;
      char tmp[65536];
      const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) {
        boost::beast::error_code ec;
        p.put_eof(ec);
        const bool ok = p.is_done();
        HttpResponse r = finish(true);
        return ok ? r : HttpResponse{};
      }
      buf_.append(tmp, size_t(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
  std::string buf_;
  std::unique_ptr<boost::beast::http::response_parser<boost::beast::http::string_body>> p_;
};

inline HttpResponse request(int port, const std::string& method, const std::string& target, const std::string& body = "",
                            const std::map<std::string, std::string>& headers = {}) {
  Client c(port);
  if (!c.send(method, target, body, headers)) return {};
  return c.read();
}

// The "data:" payloads of an event stream, in order.
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

// Folds chunk objects into the non-streaming response's "choices" and "usage" (the fields a client
// concatenating deltas rebuilds).
inline nlohmann::json fold_stream(const std::vector<std::string>& data, bool chat) {
  using json = nlohmann::json;
  std::map<int, json> choices;
  json usage;
  for (const std::string& d : data) {
    if (d == "[DONE]") continue;
    const json c = json::parse(d);
    if (c.contains("usage") && !c["usage"].is_null()) usage = c["usage"];
    for (const json& ch : c["choices"]) {
      const int i = ch["index"];
      json& o = choices[i];
      if (o.is_null()) {
        o = {{"index", i}, {"finish_reason", nullptr}, {"logprobs", nullptr}};
        if (chat) o["message"] = {{"role", "assistant"}, {"content", ""}};
        else o["text"] = "";
      }
      if (!ch["finish_reason"].is_null()) o["finish_reason"] = ch["finish_reason"];
      if (ch.contains("parse_error")) o["parse_error"] = ch["parse_error"];
      if (ch.contains("token_ids")) {
        if (!o.contains("token_ids")) o["token_ids"] = json::array();
        for (const auto& t : ch["token_ids"]) o["token_ids"].push_back(t);
      }
      if (!chat) {
        o["text"] = o["text"].get<std::string>() + ch["text"].get<std::string>();
        if (!ch["logprobs"].is_null()) {
          if (o["logprobs"].is_null()) o["logprobs"] = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                                                        {"top_logprobs", json::array()}, {"text_offset", json::array()}};
          for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
            for (const auto& v : ch["logprobs"][k]) o["logprobs"][k].push_back(v);
        }
        continue;
      }
      const json& d = ch["delta"];
      json& m = o["message"];
      if (d.contains("content")) m["content"] = m["content"].get<std::string>() + d["content"].get<std::string>();
      if (d.contains("reasoning_content"))
        m["reasoning_content"] = m.value("reasoning_content", std::string()) + d["reasoning_content"].get<std::string>();
      if (d.contains("tool_calls"))
        for (const json& t : d["tool_calls"]) {
          if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
          const size_t k = t["index"];
          while (m["tool_calls"].size() <= k)
            m["tool_calls"].push_back({{"id", ""}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
          json& call = m["tool_calls"][k];
          if (t.contains("id")) call["id"] = t["id"];
          if (t["function"].contains("name")) call["function"]["name"] = t["function"]["name"];
          call["function"]["arguments"] =
              call["function"]["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
        }
      if (!ch["logprobs"].is_null()) {
        if (o["logprobs"].is_null()) o["logprobs"] = {{"content", json::array()}};
        for (const auto& v : ch["logprobs"]["content"]) o["logprobs"]["content"].push_back(v);
      }
    }
  }
  json out = {{"choices", json::array()}, {"usage", usage}};
  for (auto& [i, c] : choices) out["choices"].push_back(c);
  return out;
}

}  // namespace dsinfer::test
