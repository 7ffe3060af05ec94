// safetensors parsing and validation; see safetensors.h. Format: u64 little-endian header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets:[begin,end]}, "__metadata__": {str: str}}, then data.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "io/json_limits.h"
#include "io/model_files.h"

namespace dsinfer::io {

using nlohmann::json;
namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: a FIFO without a writer must not block the open; it is rejected below as not a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::errorf("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::errorf("cannot stat {}: {}", path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return check_regular_file(path);  // the error naming what it is
  }
  auto mf = std::shared_ptr<MappedFile>(new MappedFile());
  mf->path_ = path;
  mf->size_ = size_t(st.st_size);
  if (mf->size_ > 0) {
    void* p = mmap(nullptr, mf->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return Status::errorf("cannot mmap {}: {}", path, std::strerror(errno));
    }
    mf->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return mf;
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

Status parse_safetensors(const uint8_t* bytes, size_t size, const std::string& path,
                         std::map<std::string, TensorView>& tensors, std::map<std::string, std::string>& metadata) {
  if (size < 8) return Status::errorf("{}: truncated file ({} bytes, need at least 8)", path, size);
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);
  if (n > size - 8) return Status::errorf("{}: header length {} exceeds file size {} (truncated file?)", path, n, size);
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), size_t(n));
  DSI_RETURN_IF_ERROR(check_json_depth(header, path + ": header"));
  json h = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) return Status::errorf("{}: header is not valid JSON", path);
  if (!h.is_object()) return Status::errorf("{}: header is not a JSON object", path);
  const uint8_t* base = bytes + 8 + n;
  const size_t data_size = size - 8 - n;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) return Status::errorf("{}: __metadata__ is not an object", path);
      for (auto m = e.begin(); m != e.end(); ++m)
        if (m.value().is_string()) metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    auto bad = [&](const std::string& why) { return Status::errorf("{}: tensor '{}': {}", path, name, why); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      return bad("entry needs dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) return bad("dtype is not a string");
    auto dt = dtype_from_string(e["dtype"].get<std::string>());
    if (!dt) return bad("unsupported dtype '" + e["dtype"].get<std::string>() + "'");
    TensorView t;
    t.name = name;
    t.file = path;
    t.dtype = *dt;
    if (!e["shape"].is_array()) return bad("shape is not an array");
    // The byte size is computed with overflow checks: a corrupt shape must not wrap around to a small size.
    size_t expect = dtype_size(t.dtype);
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("shape has a non-integer or negative entry");
      const int64_t dim = d.get<int64_t>();
      if (dim > 0 && expect > data_size / size_t(dim))
        return bad(fmt::format("shape {} needs more bytes than the file holds", e["shape"].dump()));
      expect *= size_t(dim);
      t.shape.push_back(dim);
    }
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return bad("data_offsets must be two non-negative integers");
    size_t b = off[0].get<size_t>(), en = off[1].get<size_t>();
    if (b > en) return bad(fmt::format("data_offsets begin {} > end {}", b, en));
    if (en > data_size)
      return bad(fmt::format("data ends at byte {} but the file holds {} data bytes (truncated file?)", en, data_size));
    if (en - b != expect)
      return bad(fmt::format("{} {} needs {} bytes, data_offsets give {}", dtype_name(t.dtype), shape_str(t.shape),
                             expect, en - b));
    t.data = base + b;
    t.nbytes = en - b;
    if (en > b) ranges.emplace_back(b, en);
    tensors[name] = std::move(t);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return Status::errorf("{}: tensor data ranges overlap at byte {}", path, ranges[i].first);
  return Status::ok();
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  DSI_ASSIGN_OR_RETURN(auto mf, MappedFile::open(path));
  SafetensorsFile f;
  f.file_ = mf;
  DSI_RETURN_IF_ERROR(parse_safetensors(mf->data(), mf->size(), path, f.tensors_, f.metadata_));
  return f;
}

Result<Checkpoint> Checkpoint::open(const std::string& path) {
  Checkpoint c;
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_regular_file(path)) {
    files.push_back(path);
  } else if (fs::is_directory(path)) {
    fs::path idx = fs::path(path) / "model.safetensors.index.json";
    if (fs::exists(idx) || fs::is_symlink(idx, ec)) {
      DSI_ASSIGN_OR_RETURN(const std::string text, read_regular_file(idx.string()));
      DSI_RETURN_IF_ERROR(check_json_depth(text, idx.string()));
      json j;
      try {
        j = json::parse(text);
      } catch (const std::exception& e) {
        return Status::errorf("{}: not valid JSON: {}", idx.string(), e.what());
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        return Status::errorf("{}: missing object 'weight_map'", idx.string());
      std::map<std::string, std::string> wm;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
          return Status::errorf("{}: weight_map['{}'] is not a file name", idx.string(), it.key());
        wm[it.key()] = it.value().get<std::string>();
        if (std::find(files.begin(), files.end(), it.value().get<std::string>()) == files.end())
          files.push_back(it.value().get<std::string>());
      }
      for (auto& f : files) {
        DSI_ASSIGN_OR_RETURN(f, resolve_in_model_dir(path, f, fmt::format("{}: weight_map shard", idx.string())));
      }
      for (const auto& f : files) {
        DSI_ASSIGN_OR_RETURN(auto sf, SafetensorsFile::open(f));
        c.files_.push_back(std::move(sf));
      }
      for (const auto& sf : c.files_)
        for (const auto& [n, t] : sf.tensors()) c.tensors_[n] = t;
      for (const auto& [n, f] : wm) {
        auto it = c.tensors_.find(n);
        if (it == c.tensors_.end())
          return Status::errorf("{}: weight_map lists '{}' in {} but no shard holds it", idx.string(), n, f);
        if (fs::path(it->second.file).filename() != fs::path(f).filename())
          return Status::errorf("{}: weight_map puts '{}' in {} but it is in {}", idx.string(), n, f, it->second.file);
      }
      return c;
    }
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".safetensors" && e.path().filename() != "reference.safetensors") {
        DSI_ASSIGN_OR_RETURN(std::string f, resolve_in_model_dir(path, e.path().filename().string(), "weights file"));
        files.push_back(std::move(f));
      }
    std::sort(files.begin(), files.end());
    if (files.empty()) return Status::errorf("{}: no model.safetensors or model.safetensors.index.json", path);
    if (files.size() > 1)
      return Status::errorf("{}: {} .safetensors files but no model.safetensors.index.json", path, files.size());
  } else if (fs::exists(path, ec)) {
    return check_regular_file(path);  // a FIFO, a device, a socket: named as such
  } else {
    return Status::errorf("{}: no such file or directory", path);
  }
  for (const auto& f : files) {
    DSI_ASSIGN_OR_RETURN(auto sf, SafetensorsFile::open(f));
    for (const auto& [n, t] : sf.tensors()) {
      if (c.tensors_.count(n)) return Status::errorf("tensor '{}' appears in two files ({} and {})", n, c.tensors_[n].file, f);
      c.tensors_[n] = t;
    }
    c.files_.push_back(std::move(sf));
  }
  return c;
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  json h = json::object();
  size_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while ((8 + hs.size()) % 8) hs.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) return Status::errorf("cannot write {}", path);
  uint64_t n = hs.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(hs.data(), std::streamsize(hs.size()));
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
  if (!out) return Status::errorf("error writing {}", path);
  return Status::ok();
}

TensorToWrite make_f32_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  TensorToWrite t{std::move(name), DType::F32, std::move(shape), {}};
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

TensorToWrite make_i64_tensor(std::string name, const std::vector<int64_t>& v) {
  TensorToWrite t{std::move(name), DType::I64, {int64_t(v.size())}, {}};
  t.bytes.resize(v.size() * 8);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

}  // namespace dsinfer::io
