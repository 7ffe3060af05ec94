// BatchOutput (see batch_output.h).
#include "apps/dsinfer/batch_output.h"
#include "apps/dsinfer/commands.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace dsinfer::cli {

namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

// Writes all of `s` (fwrite + fflush); false on any error.
bool write_all(FILE* f, const std::string& s) {
  return std::fwrite(s.data(), 1, s.size(), f) == s.size() && std::fflush(f) == 0 && !std::ferror(f);
}

constexpr std::string_view kFingerprintKey = R"(,"request_fingerprint":")";

// The fingerprint a record carries ("" when none), read from the end of its text as with_fingerprint() wrote it.
std::string record_fingerprint(const nlohmann::json& j) {
  const auto it = j.find("request_fingerprint");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

std::string request_fingerprint(const std::string& input_line) {
  const auto j = nlohmann::json::parse(input_line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return "";
  const std::string canonical = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bit
  for (unsigned char c : canonical) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

std::string with_fingerprint(const std::string& record, const std::string& fp) {
  if (fp.empty() || record.empty() || record.back() != '}') return record;
  return record.substr(0, record.size() - 1) + std::string(kFingerprintKey) + fp + "\"}";
}

bool check_output_is_not_input(const std::string& input, const std::string& output, std::string* error) {
  struct stat in {};
  if (::stat(input.c_str(), &in) != 0) return true;  // reading the input reports it
  for (const std::string& p : {output, output + ".partial", output + ".tmp"}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && st.st_dev == in.st_dev && st.st_ino == in.st_ino) {
      *error = p == output ? fmt::format("--output {} is the input file {} (the same file{}): the results would "
                                         "overwrite the requests; choose another output path", output, input,
                                         output == input ? "" : " through a link")
                           : fmt::format("--output {} would write {}, which is the input file {}; choose another "
                                         "output path", output, p, input);
      return false;
    }
  }
  return true;
}

BatchOutput::~BatchOutput() {
  if (f_) std::fclose(f_);
}

bool BatchOutput::open(const std::string& path, bool resume, std::string* error) {
  path_ = path;
  partial_ = path + ".partial";
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::is_directory(dir, ec)) return fail(error, fmt::format("output directory {} does not exist", dir.string()));
  const fs::file_status st = fs::status(p, ec);
  if (fs::is_directory(st)) return fail(error, fmt::format("output {} is a directory", path));
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A device or pipe: written once at the end (no rename, no partial file next to it).
    if (resume) return fail(error, fmt::format("--resume needs a regular output file, {} is not one", path));
    direct_ = true;
    return true;
  }
  // An empty partial file (a run stopped while loading the model) holds nothing to lose.
  const bool have_partial = fs::exists(partial_, ec) && fs::file_size(partial_, ec) > 0;
  if (have_partial && !resume)
    return *error = fmt::format("{} exists: an earlier run was interrupted; pass --resume to continue it (or delete "
                                "the file to start over)", partial_), false;
  if (resume) {
    if (fs::exists(p, ec) && !load_resume(path, error)) return false;
    if (have_partial && !load_resume(partial_, error)) return false;
  }
  f_ = std::fopen(partial_.c_str(), resume ? "a" : "w");
  if (!f_) return fail(error, fmt::format("cannot write {}: {}", partial_, errno_text()));
  return true;
}

bool BatchOutput::load_resume(const std::string& file, std::string* error) {
  std::ifstream in(file);
  if (!in) return fail(error, fmt::format("--resume: cannot read {}", file));
  // Lines that do not parse (a record cut short by a crash) or that carry an error are simply run again.
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("custom_id") || !j["custom_id"].is_string()) continue;
    if (!j.contains("error") || !j["error"].is_null() || !j.contains("response") || !j["response"].is_object()) continue;
    resumed_[j["custom_id"].get<std::string>()] = {line, record_fingerprint(j)};
  }
  return true;
}

bool BatchOutput::add(const std::string& record, std::string* error) {
  if (direct_) return true;
  if (!write_all(f_, record + "\n")) return fail(error, fmt::format("error writing {}: {}", partial_, errno_text()));
  return true;
}

bool BatchOutput::finish(const std::vector<std::string>& records, std::string* error) {
  std::string all;
  for (const std::string& r : records) all += r + "\n";
  if (direct_) {
    FILE* f = std::fopen(path_.c_str(), "w");
    if (!f) return fail(error, fmt::format("cannot write {}: {}", path_, errno_text()));
    bool ok = write_all(f, all);
    int saved = errno;
    if (std::fclose(f) != 0 && ok) {
      ok = false;
      saved = errno;
    }
    if (!ok) {
      errno = saved;
      return fail(error, fmt::format("error writing {}: {}", path_, errno_text()));
    }
    return true;
  }
  const std::string tmp = path_ + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return fail(error, fmt::format("cannot write {}: {}", tmp, errno_text()));
  bool ok = write_all(f, all) && ::fsync(fileno(f)) == 0;
  int saved = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    errno = saved;
    *error = fmt::format("error writing {}: {} (the finished records are in {})", tmp, errno_text(), partial_);
    std::remove(tmp.c_str());
    return false;
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0)
    return fail(error, fmt::format("cannot rename {} to {}: {}", tmp, path_, errno_text()));
  std::fclose(f_);
  f_ = nullptr;
  std::remove(partial_.c_str());
  return true;
}

}  // namespace dsinfer::cli
