// Safe opening of model directory files (see model_files.h).
#include "io/model_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace dsinfer::io {

namespace fs = std::filesystem;

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// `p` lies inside `root` (both canonical).
bool inside(const fs::path& p, const fs::path& root) {
  auto r = root.begin();
  auto i = p.begin();
  for (; r != root.end(); ++r, ++i)
    if (i == p.end() || *i != *r) return false;
  return true;
}

}  // namespace

Status check_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::errorf("cannot open {}: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return Status::errorf("{} is {}: a model file must be a regular file", path, kind_of(st.st_mode));
  return Status::ok();
}

Result<std::string> read_regular_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting; fstat then rejects it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::errorf("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int saved = errno;
    ::close(fd);
    if (!S_ISREG(st.st_mode) && st.st_mode != 0)
      return Status::errorf("{} is {}: a model file must be a regular file", path, kind_of(st.st_mode));
    return Status::errorf("cannot stat {}: {}", path, std::strerror(saved));
  }
  std::string out;
  out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      return Status::errorf("error reading {}: {}", path, std::strerror(saved));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

Result<std::string> resolve_in_model_dir(const std::string& model_dir, const std::string& entry,
                                         const std::string& where) {
  auto bad = [&](const std::string& why) {
    return Status::errorf("{} = \"{}\" {}; paths in a model directory must name files inside it ({})", where, entry,
                          why, model_dir);
  };
  if (entry.empty()) return bad("is empty");
  if (entry.find('\0') != std::string::npos) return bad("holds a NUL byte");
  const fs::path e(entry);
  if (e.is_absolute()) return bad("is an absolute path");
  for (const fs::path& part : e)
    if (part == "..") return bad("has a \"..\" component");
  const fs::path full = fs::path(model_dir) / e;
  std::error_code ec;
  const fs::path root = fs::canonical(model_dir, ec);
  if (ec) return Status::errorf("cannot open model directory {}: {}", model_dir, ec.message());
  const fs::path target = fs::weakly_canonical(full, ec);
  if (ec) return bad("cannot be resolved: " + ec.message());
  if (inside(target, root)) return full.string();
  // The Hugging Face cache: models--org--name/snapshots/<revision>/<file> -> ../../blobs/<hash>.
  if (root.parent_path().filename() == "snapshots" && inside(target, root.parent_path().parent_path() / "blobs"))
    return full.string();
  return bad("leads outside the model directory (to " + target.string() + ")");
}

}  // namespace dsinfer::io
