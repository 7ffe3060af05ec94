// The parts of the dsinfer._core module defined outside engine_module.cpp.
#pragma once
#include <nanobind/nanobind.h>

namespace dsinfer::python {

// dsinfer._core.Tokenizer and render_chat (apply_chat_template's engine side, equal to `dsinfer render-chat`).
void bind_tokenizer_and_chat(nanobind::module_& m);

}  // namespace dsinfer::python
