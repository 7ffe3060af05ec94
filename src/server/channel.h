// What the engine thread sends to the connection thread serving one request, through a Channel: the request
// was queued (its id), token events, the finished result, or an error. Many producers are not needed: only
// the engine thread pushes, only the connection thread pops.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

#include "dsinfer/engine.h"

namespace dsinfer::server {

struct Event {
  enum class Kind { kStarted, kToken, kDone, kError };
  Kind kind = Kind::kError;
  uint64_t request_id = 0;  // kStarted
  TokenEvent token;         // kToken
  RequestResult result;     // kDone
  int http_status = 500;    // kError
  std::string error_type, message;
  std::string param;  // kError: the request field the error is about (OpenAI's "param"), or ""
};

class Channel {
 public:
  void push(Event e) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      q_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  // Waits up to `timeout` for an event; false when none arrived.
  bool pop(Event& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !q_.empty(); })) return false;
    out = std::move(q_.front());
    q_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> q_;
};

}  // namespace dsinfer::server
