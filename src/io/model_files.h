// The files of a model directory, opened safely: only regular files are read (a FIFO, a device or a directory in
// place of config.json or model.safetensors is an error, not a read that blocks forever), and every path that a
// file of the directory names (the shards of model.safetensors.index.json, config.json's mtp1_file) must stay
// inside the directory: relative, without "..", and not a symbolic link that leads out of it. The one exception is
// the Hugging Face cache layout, where snapshots/<revision>/<file> links to ../../blobs/<hash>.
#pragma once
#include <string>

#include "core/status.h"

namespace dsinfer::io {

// Opens `path` without blocking, checks that it is a regular file and reads it whole. Errors name the path and
// what it is ("a FIFO", "a directory", ...).
Result<std::string> read_regular_file(const std::string& path);

// OK when `path` is a regular file (following symbolic links); otherwise an error naming the path and its kind.
// Does not block on a FIFO.
Status check_regular_file(const std::string& path);

// model_dir / entry, checked: `entry` is what `where` (e.g. "model.safetensors.index.json: weight_map['w']")
// names. Errors name `where` and the entry: empty, absolute, with a ".." component, or resolving (symbolic
// links followed) outside model_dir.
Result<std::string> resolve_in_model_dir(const std::string& model_dir, const std::string& entry,
                                         const std::string& where);

}  // namespace dsinfer::io
