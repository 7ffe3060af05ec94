// The sharded Engram placement's lookup (model/engram_rows.h, docs/decisions.md 2026-12-02 "Engram placements"):
// rank r of N keeps the rows whose id % N == r of every Engram table; one Engram layer's rows for this rank's tokens
// are gathered from their owners. Each rank sends every distinct id it needs to the id's owner, the owner answers
// with the rows (model::EngramServe), and the requester puts them in place. Any layout works: with replicated tokens
// (EP) every rank asks for the same ids, with DP attention each for its own. Host buffers on the communicator (the
// cpu backend's ranks); every rank calls it once per Engram layer and step, a rank without tokens with no ids (it
// still serves its peers). Host code, no CUDA.
#pragma once
#include <cstdint>
#include <span>

#include "core/status.h"
#include "model/engram_rows.h"
#include "parallel/communicator.h"

namespace dsinfer::parallel {

struct EngramTraffic {
  int64_t rows_asked = 0, rows_served = 0;  // distinct rows this rank asked for / answered
  int64_t bytes_sent = 0;                   // ids + rows sent by this rank (counts excluded)
};

// out[i * hd, (i + 1) * hd) = row ids[i] (fp32, what the cpu reference consumes), bit-identical to a lookup in the
// whole table. Three collectives: counts, ids, rows.
Status gather_engram_rows(Communicator& comm, std::span<const int64_t> ids, int64_t hd, const model::EngramServe& serve,
                          float* out, EngramTraffic* traffic = nullptr);

}  // namespace dsinfer::parallel
