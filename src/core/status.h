// Status / Result<T>: the error type on every boundary that can fail on user input (files, JSON, requests).
// Messages name the offending thing (file, tensor, key, line) and say expected vs found. An error about a
// request field also carries the field's name (field(): "max_tokens", "messages"), which the server reports as
// OpenAI's "param".
#pragma once
#include <string>
#include <utility>
#include <variant>
#include <fmt/format.h>

namespace dsinfer {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string msg) { Status s; s.msg_ = std::move(msg); s.failed_ = true; return s; }
  template <typename... A>
  static Status errorf(fmt::format_string<A...> f, A&&... a) { return error(fmt::format(f, std::forward<A>(a)...)); }
  // An error about the request field `field` (its top-level name, e.g. "stop" for stop[2]).
  static Status field_error(std::string field, std::string msg) {
    Status s = error(std::move(msg));
    s.field_ = std::move(field);
    return s;
  }
  template <typename... A>
  static Status field_errorf(std::string field, fmt::format_string<A...> f, A&&... a) {
    return field_error(std::move(field), fmt::format(f, std::forward<A>(a)...));
  }
  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return msg_; }
  const std::string& field() const { return field_; }  // "" when the error is not about one request field
  // Prefix context ("while loading X: ...") without losing the original message or field.
  Status with_context(const std::string& ctx) const { return failed_ ? field_error(field_, ctx + ": " + msg_) : *this; }
  // The same error, about `field` unless it already names one.
  Status with_field(const std::string& field) const {
    return failed_ && field_.empty() ? field_error(field, msg_) : *this;
  }

 private:
  std::string msg_, field_;
  bool failed_ = false;
};

template <typename T>
class Result {
 public:
  Result(T v) : v_(std::move(v)) {}                     // NOLINT(implicit)
  Result(Status s) : v_(std::move(s)) {}                // NOLINT(implicit): must be an error status
  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dsinfer

// Early-return helpers for Status/Result plumbing.
#define DSI_RETURN_IF_ERROR(expr)                 \
  do {                                            \
    ::dsinfer::Status _s = (expr);                \
    if (!_s.is_ok()) return _s;                   \
  } while (0)
#define DSI_CONCAT_INNER(a, b) a##b
#define DSI_CONCAT(a, b) DSI_CONCAT_INNER(a, b)
#define DSI_ASSIGN_OR_RETURN(lhs, expr) DSI_ASSIGN_OR_RETURN_IMPL(DSI_CONCAT(_r_, __LINE__), lhs, expr)
#define DSI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.is_ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
