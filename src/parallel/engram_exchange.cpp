// Sharded Engram lookup (see engram_exchange.h).
#include "parallel/engram_exchange.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace dsinfer::parallel {

Status gather_engram_rows(Communicator& comm, std::span<const int64_t> ids, int64_t hd, const model::EngramServe& serve,
                          float* out, EngramTraffic* traffic) {
  const int32_t n = comm.world();
  if (hd < 1 || (!ids.empty() && !out)) return Status::errorf("engram gather: row width {} or no output", hd);
  // The distinct ids each owner is asked for, sorted.
  std::vector<std::vector<int64_t>> to(static_cast<size_t>(n));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) return Status::errorf("engram gather: token row {} looks up id {}", i, ids[i]);
    to[size_t(ids[i] % n)].push_back(ids[i]);
  }
  for (auto& v : to) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  // 1. Counts.
  std::vector<int64_t> send_count(static_cast<size_t>(n)), recv_count(static_cast<size_t>(n));
  for (int32_t q = 0; q < n; ++q) send_count[size_t(q)] = int64_t(to[size_t(q)].size());
  const std::vector<size_t> eight(static_cast<size_t>(n), sizeof(int64_t));
  DSI_RETURN_IF_ERROR(comm.all_to_all_v(send_count.data(), eight, recv_count.data(), eight, nullptr));
  // 2. The ids, packed by owner.
  std::vector<size_t> sbytes(static_cast<size_t>(n)), rbytes(static_cast<size_t>(n));
  std::vector<int64_t> send, asked;
  for (int32_t q = 0; q < n; ++q) {
    if (recv_count[size_t(q)] < 0) return Status::errorf("engram gather: rank {} announced {} ids", q, recv_count[size_t(q)]);
    sbytes[size_t(q)] = to[size_t(q)].size() * sizeof(int64_t);
    rbytes[size_t(q)] = size_t(recv_count[size_t(q)]) * sizeof(int64_t);
    send.insert(send.end(), to[size_t(q)].begin(), to[size_t(q)].end());
  }
  int64_t served = 0;
  for (int64_t c : recv_count) served += c;
  asked.resize(size_t(served));
  DSI_RETURN_IF_ERROR(comm.all_to_all_v(send.data(), sbytes, asked.data(), rbytes, nullptr));
  // 3. This rank's rows for every asker, in the order asked; then each owner's rows back to the askers.
  std::vector<float> rows(size_t(served * hd)), back(send.size() * size_t(hd));
  DSI_RETURN_IF_ERROR(serve(asked, rows.data()));
  const size_t row_bytes = size_t(hd) * sizeof(float);
  for (int32_t q = 0; q < n; ++q) {
    sbytes[size_t(q)] = size_t(recv_count[size_t(q)]) * row_bytes;
    rbytes[size_t(q)] = to[size_t(q)].size() * row_bytes;
  }
  DSI_RETURN_IF_ERROR(comm.all_to_all_v(rows.data(), sbytes, back.data(), rbytes, nullptr));
  // Put every looked-up row in place: owner q's rows follow the earlier owners' in `back`, sorted by id.
  std::vector<size_t> first(static_cast<size_t>(n), 0);
  for (int32_t q = 1; q < n; ++q) first[size_t(q)] = first[size_t(q - 1)] + to[size_t(q - 1)].size();
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<int64_t>& v = to[size_t(ids[i] % n)];
    const size_t at = first[size_t(ids[i] % n)] + size_t(std::lower_bound(v.begin(), v.end(), ids[i]) - v.begin());
    std::memcpy(out + i * size_t(hd), back.data() + at * size_t(hd), row_bytes);
  }
  if (traffic) {
    traffic->rows_asked += int64_t(send.size());
    traffic->rows_served += served;
    traffic->bytes_sent += int64_t(send.size() * sizeof(int64_t)) + served * hd * int64_t(sizeof(float));
  }
  return Status::ok();
}

}  // namespace dsinfer::parallel
