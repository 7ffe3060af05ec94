// The list of subcommands shown by `dsinfer --help`.
#include "apps/dsinfer/commands.h"

namespace dsinfer::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"generate", "offline generation: OpenAI Batch JSONL in/out, or one --prompt", cmd_generate},
      {"serve", "OpenAI-compatible HTTP server (chat / completions, streaming, /metrics)", cmd_serve},
      {"bench", "per-op and end-to-end decode / prefill timing next to roofline floors (cuda)", cmd_bench},
      {"plan", "memory per GPU for 1 / 2 / 4 / 8 GPUs and the sequences that fit (config.json only)", cmd_plan},
      {"convert", "write a DeepSeek-V4.1 checkpoint in the release's storage formats (from a model or random)",
       cmd_convert},
      {"check-reference", "compare the CPU reference forward with reference logits (fixture format)",
       cmd_check_reference},
      {"tokenize", "JSON-lines texts -> token id arrays (--tokenizer FILE [--plain])", cmd_tokenize},
      {"detokenize", "JSON-lines token id arrays -> texts (--tokenizer FILE)", cmd_detokenize},
      {"render-chat", "chat requests -> V4 prompt text + token ids, or --parse-output (--tokenizer FILE)", cmd_render_chat},
  };
  return kCommands;
}

}  // namespace dsinfer::cli
