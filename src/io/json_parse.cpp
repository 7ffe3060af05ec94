// Linear-time ordered_json parsing (see json_parse.h).
#include "io/json_parse.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/json_limits.h"

namespace dsinfer::io {

namespace {

using ojson = nlohmann::ordered_json;

// Objects up to this many keys find a duplicate by a linear scan; larger ones build a hash index once.
constexpr size_t kLinearScanKeys = 32;

class Builder : public nlohmann::json_sax<ojson> {
 public:
  bool null() override { return place(ojson(nullptr)); }
  bool boolean(bool v) override { return place(ojson(v)); }
  bool number_integer(number_integer_t v) override { return place(ojson(v)); }
  bool number_unsigned(number_unsigned_t v) override { return place(ojson(v)); }
  bool number_float(number_float_t v, const string_t&) override { return place(ojson(v)); }
  bool string(string_t& v) override { return place(ojson(std::move(v))); }
  bool binary(binary_t& v) override { return place(ojson::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(ojson::object()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(ojson::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    error_ = ex.what();
    return false;
  }

  ojson& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    ojson* v;
    std::unordered_map<std::string, size_t> index;  // key -> position, once the object outgrows the scan
  };

  // Adds v to the open container (or as the root); returns where it now lives through *at.
  bool place(ojson v, ojson** at = nullptr) {
    ojson* slot = nullptr;
    if (stack_.empty()) {
      root_ = std::move(v);
      slot = &root_;
    } else if (stack_.back().v->is_array()) {
      ojson::array_t& a = stack_.back().v->get_ref<ojson::array_t&>();
      a.push_back(std::move(v));
      slot = &a.back();
    } else {
      slot = insert(stack_.back(), std::move(v));
    }
    if (at) *at = slot;
    return true;
  }

  ojson* insert(Frame& f, ojson v) {
    ojson::object_t& o = f.v->get_ref<ojson::object_t&>();
    auto& items = static_cast<ojson::object_t::Container&>(o);  // append without ordered_map's linear search
    size_t found = items.size();
    if (!f.index.empty()) {
      if (auto it = f.index.find(key_); it != f.index.end()) found = it->second;
    } else {
      for (size_t i = 0; i < items.size(); ++i)
        if (items[i].first == key_) found = i;
    }
    if (found < items.size()) {  // a duplicate key: the last value wins, at the first position (nlohmann's rule)
      items[found].second = std::move(v);
      return &items[found].second;
    }
    items.emplace_back(key_, std::move(v));
    if (!f.index.empty()) {
      f.index.emplace(std::move(key_), items.size() - 1);
    } else if (items.size() > kLinearScanKeys) {
      f.index.reserve(items.size() * 2);
      for (size_t i = 0; i < items.size(); ++i) f.index.emplace(items[i].first, i);
    }
    return &items.back().second;
  }

  bool open(ojson container) {
    ojson* at = nullptr;
    place(std::move(container), &at);
    stack_.push_back(Frame{at, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  ojson root_;
  std::vector<Frame> stack_;
  std::string key_;
  std::string error_;
};

}  // namespace

Result<ojson> parse_json(std::string_view text, std::string_view what) {
  DSI_RETURN_IF_ERROR(check_json_depth(text, what));
  Builder b;
  bool ok = false;
  try {
    ok = ojson::sax_parse(text.begin(), text.end(), &b, nlohmann::detail::input_format_t::json, /*strict=*/true);
  } catch (const std::exception& e) {
    return Status::errorf("{} is not valid JSON: {}", what, e.what());
  }
  if (!ok) return Status::errorf("{} is not valid JSON: {}", what, b.error().empty() ? "parse error" : b.error());
  return std::move(b.root());
}

}  // namespace dsinfer::io
