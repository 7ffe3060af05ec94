// Crash-safe output of `dsinfer generate --input/--output`. Each finished record is appended (and flushed) to
// <output>.partial as soon as it exists, in completion order; at the end the records are written in input-line
// order to <output>.tmp, synced and renamed onto <output>, and the partial file is removed. A run that is
// killed, crashes or is interrupted therefore never loses a finished record, and `--resume` reuses the
// successful records found in <output> and <output>.partial (matched by custom_id) instead of recomputing them.
// An output that is not a regular file (/dev/stdout, a FIFO, /dev/full) is written directly at the end.
// Every success record ends with "request_fingerprint": a hash of its input line (request_fingerprint()), so that
// --resume reuses a record only for the very request that made it: a line whose request changed runs again.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace dsinfer::cli {

// A record reused by --resume: its text and the fingerprint of the request that made it ("" for a record
// written by a dsinfer before fingerprints: it cannot be matched and runs again).
struct ResumedRecord {
  std::string line, fingerprint;
};

// The fingerprint of one input line: 16 hex digits of a 64-bit FNV-1a hash of the line's JSON in canonical form
// (keys sorted, no whitespace), so reformatting a line does not count as a change; "" when the line is not JSON.
// Only for lines parse_batch_line accepted (their nesting depth is bounded: the dump here recurses).
std::string request_fingerprint(const std::string& input_line);
// `record` (one JSON object, no newline) with "request_fingerprint": fp appended as its last member.
std::string with_fingerprint(const std::string& record, const std::string& fp);

// Refuses an output path that is the input file itself (the same inode: the same name, a symbolic link or a hard
// link to it), or whose partial / temporary file (OUTPUT.partial, OUTPUT.tmp) would be. False with *error.
bool check_output_is_not_input(const std::string& input, const std::string& output, std::string* error);

class BatchOutput {
 public:
  ~BatchOutput();
  // Checks the path before any work is done (the directory exists, the output is not a directory, a partial
  // file from an interrupted run is not silently overwritten) and opens the partial file. On failure returns
  // false with *error.
  bool open(const std::string& path, bool resume, std::string* error);
  // Successful records of an earlier run, by custom_id (filled by open() with resume).
  const std::map<std::string, ResumedRecord>& resumed() const { return resumed_; }
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
  std::map<std::string, ResumedRecord> resumed_;
};

}  // namespace dsinfer::cli
