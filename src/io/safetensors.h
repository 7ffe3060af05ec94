// Memory-mapped safetensors files, single or sharded (model.safetensors.index.json). Every header is
// validated (JSON shape, dtype names, offsets inside the file, byte size = numel * dtype size, no overlap)
// before any tensor is handed out, so a bad file is an error naming the file and tensor, never a crash.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "core/status.h"

namespace dsinfer::io {

struct TensorView {
  std::string name;
  std::string file;  // file it lives in (for error messages)
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  // Element i of an I64 or I32 tensor (caller checked the dtype).
  int64_t int_at(int64_t i) const {
    if (dtype == DType::I64) {
      int64_t v;
      std::memcpy(&v, data + 8 * i, 8);
      return v;
    }
    int32_t v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
};

std::string shape_str(const std::vector<int64_t>& shape);

class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Parses and validates a whole safetensors file held in memory (`path` names it in errors). TensorViews
// point into `bytes`. Used by SafetensorsFile::open and the fuzz target.
Status parse_safetensors(const uint8_t* bytes, size_t size, const std::string& path,
                         std::map<std::string, TensorView>& tensors, std::map<std::string, std::string>& metadata);

// One parsed safetensors file.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_->path(); }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory (or a single .safetensors path).
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::string& path);
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, TensorView> tensors_;
};

// Writes tensors (F32 or I64 payloads) to a safetensors file; used by --dump-logits and tests.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);
TensorToWrite make_f32_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v);
TensorToWrite make_i64_tensor(std::string name, const std::vector<int64_t>& v);

}  // namespace dsinfer::io
