// The op dump of CudaForwardV41 (DSINFER_V41_DUMP, backends/cuda/runner/forward_v41.h dump) and its comparison
// with the CPU reference's taps of the same forward (model::DeepseekV41Cpu::set_tap): one record per named
// intermediate, "V41D", name (48 bytes, NUL-padded), int32 layer, int32 is_int32, int64 rows, int64 cols, then
// rows x cols 4-byte values. Read back as floats (int32 values converted).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace dsinfer::test {

struct DumpRecord {
  std::string name;
  int64_t layer = -1;
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
};

inline std::vector<DumpRecord> read_v41_dump(const std::string& path) {
  std::vector<DumpRecord> out;
  std::ifstream f(path, std::ios::binary);
  char magic[4], name[48];
  int32_t meta[2];
  int64_t shape[2];
  while (f.read(magic, 4)) {
    if (std::memcmp(magic, "V41D", 4) != 0) break;
    f.read(name, 48);
    f.read(reinterpret_cast<char*>(meta), sizeof(meta));
    f.read(reinterpret_cast<char*>(shape), sizeof(shape));
    if (!f || shape[0] < 0 || shape[1] < 0) break;
    DumpRecord r;
    r.name.assign(name, strnlen(name, 48));
    r.layer = meta[0];
    r.rows = shape[0];
    r.cols = shape[1];
    r.v.resize(size_t(r.rows * r.cols));
    f.read(reinterpret_cast<char*>(r.v.data()), std::streamsize(r.v.size() * 4));
    if (!f) break;
    if (meta[1]) {
      for (float& x : r.v) {
        int32_t i;
        std::memcpy(&i, &x, 4);
        x = float(i);
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

// One intermediate of both sides: how many values differ, the largest difference and the largest reference value.
// Selections (idx.sel, ffn.ridx) and their weights compare as sorted rows: the order of picks is not semantic.
struct OpDiff {
  std::string name;
  int64_t layer = -1, count = 0, differ = 0;
  double max_abs = 0, max_ref = 0;
  bool shape_mismatch = false;
};

inline OpDiff diff_records(const DumpRecord& gpu, const DumpRecord& cpu) {
  OpDiff d;
  d.name = gpu.name;
  d.layer = gpu.layer;
  if (gpu.rows != cpu.rows || gpu.cols != cpu.cols) {
    d.shape_mismatch = true;
    return d;
  }
  std::vector<float> g = gpu.v, c = cpu.v;
  if (gpu.name == "idx.sel" || gpu.name == "ffn.ridx" || gpu.name == "ffn.rw") {
    for (int64_t r = 0; r < gpu.rows; ++r) {
      std::sort(g.begin() + r * gpu.cols, g.begin() + (r + 1) * gpu.cols);
      std::sort(c.begin() + r * gpu.cols, c.begin() + (r + 1) * gpu.cols);
    }
  }
  d.count = int64_t(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double e = std::fabs(double(g[i]) - double(c[i]));
    if (!(e == 0.0)) ++d.differ;
    d.max_abs = std::max(d.max_abs, std::isnan(e) ? INFINITY : e);
    d.max_ref = std::max(d.max_ref, double(std::fabs(c[i])));
  }
  return d;
}

// Every GPU record that has a CPU twin (same name and layer), in the forward's order.
inline std::vector<OpDiff> compare_dumps(const std::vector<DumpRecord>& gpu, const std::vector<DumpRecord>& cpu) {
  std::vector<OpDiff> out;
  for (const DumpRecord& g : gpu)
    for (const DumpRecord& c : cpu)
      if (c.name == g.name && c.layer == g.layer) {
        out.push_back(diff_records(g, c));
        break;
      }
  return out;
}

inline void print_op_diffs(const std::vector<OpDiff>& ds) {
  for (const OpDiff& d : ds) {
    if (d.shape_mismatch) {
      std::printf("  %-20s layer %2lld: shapes differ\n", d.name.c_str(), (long long)d.layer);
      continue;
    }
    std::printf("  %-20s layer %2lld: %6lld of %6lld values differ, max |diff| %.3g (max |cpu| %.3g)\n", d.name.c_str(),
                (long long)d.layer, (long long)d.differ, (long long)d.count, d.max_abs, d.max_ref);
  }
}

}  // namespace dsinfer::test
