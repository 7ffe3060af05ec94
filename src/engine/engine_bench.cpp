// dsinfer::run_engine_decode_bench (include/dsinfer/diagnostics.h): decode through the whole Engine at batch B, with
// the runner's step events (runner::RunnerDiagnostics::set_step_events) for the device idle time between steps. The runner
// is built here (dummy weights, --layers) and handed to Engine::create_with_runner, so the engine runs exactly as
// in `dsinfer generate`.
#include <chrono>

#include "dsinfer/diagnostics.h"
#include "engine/engine.h"
#include "engine/runner_factory.h"

namespace dsinfer {

namespace {

Status engine_decode(const EngineDecodeOptions& o, EngineDecodeReport& rep) {
  if (o.batch < 1 || o.prompt_tokens < 1 || o.decode_steps < 1)
    return Status::errorf("engine-decode: batch {}, prompt {} and steps {} must be >= 1", o.batch, o.prompt_tokens,
                          o.decode_steps);
  DSI_ASSIGN_OR_RETURN(runner::RunnerOptions ro,
                       runner::runner_options(o.model_dir, o.backend, o.numerics, o.load_format));
  ro.num_layers = o.num_layers;
  ro.gpus = o.gpus;
  ro.tensor_parallel_size = o.tensor_parallel_size;
  ro.data_parallel_size = o.data_parallel_size;
  ro.communicator = o.communicator;
  DSI_ASSIGN_OR_RETURN(std::unique_ptr<runner::ModelRunner> runner, engine::create_runner(ro));
  rep.runner_name = runner->name();
  EngineOptions eo;
  eo.model_dir = o.model_dir;
  eo.max_num_seqs = int32_t(o.batch);
  eo.max_num_batched_tokens = std::max<int64_t>(2048, o.batch * o.prompt_tokens);  // the whole prefill in one step
  eo.max_model_len = o.prompt_tokens + o.decode_steps + 16;
  eo.async_scheduling = o.async_scheduling;
  DSI_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> e, engine::Engine::create_with_runner(eo, std::move(runner)));
  rep.step_mode = e->step_mode();
  const int64_t V = e->model_config().vocab_size;
  for (int64_t i = 0; i < o.batch; ++i) {
    Request r;
    r.prompt_is_ids = true;
    for (int64_t k = 0; k < o.prompt_tokens; ++k) r.prompt_ids.push_back(int32_t(8 + (i * 7919 + k * 104729) % (V - 8)));
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;  // every request decodes to max_tokens: a constant batch
    r.sampling.max_tokens = o.decode_steps + 8;
    DSI_RETURN_IF_ERROR(e->add(r).status());
  }
  rep.device_events = bool(e->runner_diagnostics().set_step_events(true));
  // Prefill + two decode steps of warm-up (CUDA graph capture of the batch size).
  for (int k = 0; k < 3; ++k) DSI_RETURN_IF_ERROR(e->step());
  runner::RunnerDiagnostics::StepGapTimes t0, t1;
  if (rep.device_events) {
    DSI_ASSIGN_OR_RETURN(t0, e->runner_diagnostics().step_gap_times());
  }
  const auto w0 = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < o.decode_steps; ++k) DSI_RETURN_IF_ERROR(e->step());
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
  if (rep.device_events) {
    DSI_ASSIGN_OR_RETURN(t1, e->runner_diagnostics().step_gap_times());
  }
  rep.steps = o.decode_steps;
  rep.wall_ms_per_step = wall / double(o.decode_steps);
  const int64_t n = t1.steps - t0.steps;
  if (rep.device_events && n > 0) {
    rep.busy_ms_per_step = (t1.busy_ms - t0.busy_ms) / double(n);
    rep.idle_ms_per_step = (t1.idle_ms - t0.idle_ms) / double(n);
  }
  while (e->has_unfinished()) DSI_RETURN_IF_ERROR(e->step());  // drain (the outstanding step is waited for)
  return Status::ok();
}

}  // namespace

bool run_engine_decode_bench(const EngineDecodeOptions& options, EngineDecodeReport* report, std::string* error) {
  EngineDecodeReport local;
  EngineDecodeReport& rep = report ? *report : local;
  rep = EngineDecodeReport{};
  if (Status s = engine_decode(options, rep); !s) {
    if (error) *error = s.message();
    return false;
  }
  return true;
}

}  // namespace dsinfer
