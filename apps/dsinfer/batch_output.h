// Crash-safe output of `dsinfer generate --input/--output`. Each finished record is appended (and flushed) to
// <output>.partial as soon as it exists, in completion order; at the end the records are written in input-line
// order to <output>.tmp, synced and renamed onto <output>, and the partial file is removed. A run that is
// killed, crashes or is interrupted therefore never loses a finished record, and `--resume` reuses the
// successful records found in <output> and <output>.partial (matched by custom_id) instead of recomputing them.
// An output that is not a regular file (/dev/stdout, a FIFO, /dev/full) is written directly at the end.
#pragma once
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace dsinfer::cli {

class BatchOutput {
 public:
  ~BatchOutput();
  // Checks the path before any work is done (the directory exists, the output is not a directory, a partial
  // file from an interrupted run is not silently overwritten) and opens the partial file. On failure returns
  // false with *error.
  bool open(const std::string& path, bool resume, std::string* error);
  // Successful records of an earlier run, by custom_id (filled by open() with resume).
  const std::map<std::string, std::string>& resumed() const { return resumed_; }
  // Appends one finished record (one JSON line, no newline) to the partial file and flushes it. False with
  // *error when the write failed (disk full, I/O error).
  bool add(const std::string& record, std::string* error);
  // Writes all records in order to the output (atomically for a regular file) and removes the partial file.
  bool finish(const std::vector<std::string>& records, std::string* error);
  const std::string& partial_path() const { return partial_; }

 private:
  bool load_resume(const std::string& file, std::string* error);
  std::string path_, partial_;
  bool direct_ = false;  // not a regular file: no partial file, written once at the end
  FILE* f_ = nullptr;
  std::map<std::string, std::string> resumed_;
};

}  // namespace dsinfer::cli
