// The public Engine's private state (include/dsinfer/engine.h), shared by the files implementing it
// (public_api.cpp, stream_format.cpp).
#pragma once
#include <memory>
#include <string>

#include "chat/chat_defaults.h"
#include "dsinfer/engine.h"
#include "engine/engine.h"

namespace dsinfer {

struct Engine::Impl {
  std::unique_ptr<engine::Engine> e;
  std::string model_name;
  chat::ChatDefaults chat_defaults;  // the model directory's (chat_defaults.json), applied by submit
};

}  // namespace dsinfer
