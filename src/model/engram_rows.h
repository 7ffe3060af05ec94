// Where DeepSeek-V4.1's Engram tables live and how a step gets its rows (issue 26; docs/decisions.md 2026-12-02
// "Engram placements"). The release's tables are 188.8 GiB, more than any GPU holds, so besides a full copy per
// rank (kDevice, the default and what the small models use) there are two placements:
// - kSharded: rank r of N keeps the rows whose id % N == r; each Engram layer's lookup is one collective gather
//   of the looked-up rows from their owners (EngramShard::gather; parallel/engram_exchange.h implements it over a
//   Communicator).
// - kHost: the tables stay in host memory in their checkpoint format (FP8 rows with E8M0 scales per 32 channels,
//   or float), never decoded whole. A step's hash ids depend only on its token ids, so the rows of every Engram
//   layer are fetched on a worker as soon as the ids are known, while the layers before them run; the Engram layer
//   waits only for what is not done yet. (The CUDA runner does the same from pinned host memory on a side stream.)
// Every placement gives the same rows, so the logits are bit-identical.
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "model/engram_placement.h"
#include "model/weights.h"
#include "model/weights_v41.h"

namespace dsinfer::model {

// Answers the lookups other ranks send this one: out[i * hd, (i + 1) * hd) = row ids[i] (ids this rank owns).
using EngramServe = std::function<Status(std::span<const int64_t> ids, float* out)>;
struct EngramShard {
  int32_t rank = 0, world = 1;
  // Collective (every rank calls it once per Engram layer and step, in the same order): out[i * hd ..) = row ids[i]
  // of the layer's table, from the rank that owns it; `serve` answers the requests of the other ranks.
  std::function<Status(std::span<const int64_t> ids, int64_t hd, const EngramServe& serve, float* out)> gather;
};

class EngramRows {
 public:
  // kDevice: the decoded fp32 tables, one per Engram layer.
  explicit EngramRows(std::vector<Mat> tables);
  // kHost: the tables as stored (load_weights_v41's stored_tables), views into *ckpt, which is kept alive here.
  EngramRows(std::shared_ptr<const io::Checkpoint> ckpt, std::vector<StoredTensorV41> tables);
  ~EngramRows();
  EngramRows(const EngramRows&) = delete;
  EngramRows& operator=(const EngramRows&) = delete;

  EngramPlacement placement() const { return placement_; }
  // kDevice -> kSharded: keeps only this rank's rows (id % world == rank) of every table.
  Status shard(EngramShard s);
  // Bytes of the tables this rank holds (decoded rows, or the stored bytes for kHost).
  double bytes() const;

  // Once per step, with the hash ids [T, layers, cols]: the host placement starts fetching every layer's rows on a
  // worker (from its own copy of the ids).
  void prefetch(std::span<const int64_t> hashes, int64_t T, int64_t cols);
  // out [T * cols * hd] = the rows of Engram layer e (0-based among the Engram layers) for the step's hash ids.
  Status rows(int64_t e, std::span<const int64_t> hashes, int64_t T, int64_t cols, std::vector<float>& out);
  // kHost: milliseconds the last step's fetch took on the worker, and how long the forward waited for it.
  double last_fetch_ms() const { return fetch_ms_; }
  double last_wait_ms() const { return wait_ms_; }

 private:
  int64_t layers() const;
  int64_t hd() const;
  Status check_id(int64_t e, int64_t id) const;
  Status fetch(std::span<const int64_t> hashes, int64_t T, int64_t cols);  // kHost: every layer into staged_

  EngramPlacement placement_ = EngramPlacement::kDevice;
  std::vector<Mat> tables_;              // kDevice / kSharded (kSharded: local row id / world)
  std::vector<int64_t> table_rows_;            // every table's full row count
  EngramShard shard_;
  std::shared_ptr<const io::Checkpoint> ckpt_;
  std::vector<StoredTensorV41> stored_;  // kHost
  std::vector<int64_t> ids_;              // kHost: the step's hash ids, read by the worker
  std::vector<std::vector<float>> staged_;
  std::future<Status> pending_;
  double fetch_ms_ = 0, wait_ms_ = 0;
};

}  // namespace dsinfer::model
