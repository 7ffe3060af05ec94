// `dsinfer convert`: a DeepSeek-V4.1 checkpoint in the release's storage formats, converted from a model folder or
// filled with random values at given shapes (dsinfer::convert_checkpoint, include/dsinfer/diagnostics.h).
#include <cstdio>
#include <string>

#include "apps/dsinfer/commands.h"
#include "apps/dsinfer/engine_flags.h"
#include "dsinfer/diagnostics.h"

namespace dsinfer::cli {

namespace {

const char* const kUsage =
    "usage: dsinfer convert (--model DIR | --config CONFIG [--set KEY=VALUE]... [--seed N]) --out DIR\n"
    "                       [--shard-mib 1024] [--threads 1]\n"
    "  writes a DeepSeek-V4.1 checkpoint in the release's storage formats (FP8 dense projections with E8M0 scales\n"
    "  per 32x32 block, FP4 routed experts, FP8 Engram rows), sharded with model.safetensors.index.json.\n"
    "  --model: convert a V4.1 model folder (values quantized with the official rule, tokenizer files copied);\n"
    "  --config: random values at the shapes of a config.json (file or folder), each --set KEY=VALUE overriding a\n"
    "  field of it (a JSON value; e.g. --set num_hidden_layers=3 --set 'engram_num_embeddings=[1048576]')\n";

}  // namespace

int cmd_convert(int argc, char** argv) {
  ConvertOptions o;
  const int rc = parse_value_flags("convert", kUsage, argc, argv, [&](const std::string& a, const std::string& v) {
    bool ok = true;
    if (a == "--model") o.model_dir = v;
    else if (a == "--config") o.config = v;
    else if (a == "--set") o.set.push_back(v);
    else if (a == "--out") o.out_dir = v;
    else if (a == "--seed") ok = parse_int_flag("convert", a, v, 0, (1ll << 62), &o.seed);
    else if (a == "--threads") ok = parse_int_flag("convert", a, v, 1, 256, &o.threads);
    else if (a == "--shard-mib") {
      int64_t mib = 0;
      ok = parse_int_flag("convert", a, v, 1, 1 << 20, &mib);
      o.shard_bytes = mib << 20;
    } else {
      return FlagParse::kNotEngineFlag;
    }
    return ok ? FlagParse::kOk : FlagParse::kError;
  });
  if (rc >= 0) return rc;
  if (o.out_dir.empty() || o.model_dir.empty() == o.config.empty()) {
    std::fprintf(stderr, "convert: give --out and one of --model / --config\n%s", kUsage);
    return 2;
  }
  std::string err;
  if (!convert_checkpoint(o, &err)) {
    std::fprintf(stderr, "convert: %s\n", err.c_str());
    return 1;
  }
  std::printf("convert: wrote %s\n", o.out_dir.c_str());
  return 0;
}

}  // namespace dsinfer::cli
