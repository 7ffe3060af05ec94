// The public Engine's private state (include/dsinfer/engine.h), shared by the files implementing it
// (public_api.cpp, stream_format.cpp).
#pragma once
#include <memory>
#include <string>

#include "chat/chat_defaults.h"
#include "dsinfer/engine.h"
#include "engine/engine.h"
#include "structured/compile_pool.h"

namespace dsinfer {

struct Engine::Impl {
  std::unique_ptr<engine::Engine> e;
  std::string model_name;
  chat::ChatDefaults chat_defaults;  // the model directory's (chat_defaults.json), applied by submit
  // prepare_async's workers; declared after `e` so they are joined before the engine goes
  mutable structured::CompilePool compile_pool;
};

}  // namespace dsinfer
