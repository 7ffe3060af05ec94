// include/dsinfer/diagnostics.h: option strings -> runner options, the runner from the factory, then the checker
// (src/check) or the bench driver (src/perf/bench). Here and not in src/check or src/perf because creating a
// runner needs engine::create_runner (dsinfer_engine), and src/perf is part of dsinfer_core below it.
#include "dsinfer/diagnostics.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "cache/state_format.h"
#include "cache/state_layout.h"
#include "check/fidelity_check.h"
#include "check/reference_check.h"
#include "check/reference_numerics.h"
#include "engine/runner_factory.h"
#include "io/config.h"
#include "model/tensor_table.h"
#include "model/export_v41.h"
#include "model/weights_v41.h"
#include "parallel/parallel_plan.h"
#include "perf/bench.h"
#include "perf/ceilings.h"

namespace dsinfer {

namespace {

bool fail(const Status& s, std::string* error) {
  if (error) *error = s.message();
  return false;
}

// Fidelity mode: an exact and a fast runner of the same model; the stream's seeds come from the reference's
// prompt ids (or, for an official-format reference without ids, from model_dir/reference.safetensors).
Status run_fidelity(const CheckReferenceOptions& o, runner::RunnerOptions ro, const io::SafetensorsFile& ref,
                    CheckReferenceReport& rep) {
  if (!(o.min_top1 >= 0 && o.min_top1 <= 1) || !(o.max_kl >= 0))
    return Status::errorf("check_reference: min_top1 {} must be in [0, 1] and max_kl {} >= 0", o.min_top1, o.max_kl);
  auto seeds = check::fidelity_seeds(ref);
  const std::string ids_path = (std::filesystem::path(o.model_dir) / "reference.safetensors").string();
  if (!seeds && rep.reference_path != ids_path) {
    DSI_ASSIGN_OR_RETURN(io::SafetensorsFile ids, io::SafetensorsFile::open(ids_path));
    seeds = check::fidelity_seeds(ids);
  }
  if (!seeds) return seeds.status();
  ro.exact_gemm = true;
  DSI_ASSIGN_OR_RETURN(auto exact, engine::create_runner(ro));
  ro.exact_gemm = false;
  DSI_ASSIGN_OR_RETURN(auto fast, engine::create_runner(ro));
  check::FidelityOptions fo;
  fo.positions = o.fidelity_positions;
  fo.seq_len = o.fidelity_seq_len;
  fo.chunk = o.fidelity_chunk;
  DSI_ASSIGN_OR_RETURN(check::Fidelity f, check::check_fidelity(*exact, *fast, *seeds, fo));
  FidelityResult& r = rep.fidelity;
  r.exact_runner = exact->name();
  r.fast_runner = fast->name();
  r.positions = f.positions;
  r.sequences = f.sequences;
  r.top1_matches = f.top1_matches;
  r.top1 = f.top1();
  r.mean_kl = f.mean_kl;
  r.max_kl = f.max_kl;
  r.max_logit_diff = f.max_logit_diff;
  r.min_top1 = o.min_top1;
  r.max_kl_allowed = o.max_kl;
  rep.runner_name = r.fast_runner;
  rep.ok = r.top1 >= o.min_top1 && r.mean_kl <= o.max_kl;
  return Status::ok();
}

Status run_check(const CheckReferenceOptions& o, CheckReferenceReport& rep) {
  if (o.model_dir.empty()) return Status::error("check_reference: no model directory given");
  rep.model_dir = o.model_dir;
  rep.reference_path = o.reference_path.empty()
                           ? (std::filesystem::path(o.model_dir) / "reference.safetensors").string()
                           : o.reference_path;
  DSI_ASSIGN_OR_RETURN(io::SafetensorsFile ref, io::SafetensorsFile::open(rep.reference_path));
  // No numerics given: those the reference was made with.
  std::string numerics = o.numerics;
  rep.numerics_source = "given";
  if (numerics.empty()) {
    DSI_ASSIGN_OR_RETURN(check::ReferenceNumerics rn, check::reference_numerics(ref));
    numerics = rn.numerics.name;
    rep.numerics_source = rn.source;
  }
  DSI_ASSIGN_OR_RETURN(runner::RunnerOptions ro, runner::runner_options(o.model_dir, o.backend, numerics));
  ro.exact_gemm = o.exact_gemm;
  ro.gpus = o.gpus;
  ro.communicator = o.communicator;
  ro.data_parallel_size = o.data_parallel_size;
  ro.tensor_parallel_size = o.tensor_parallel_size;
  DSI_ASSIGN_OR_RETURN(ro.engram_placement, model::parse_engram_placement(o.engram_placement));
  rep.numerics = ro.numerics.name;
  if (o.fidelity) return run_fidelity(o, ro, ref, rep);
  DSI_ASSIGN_OR_RETURN(auto runner, engine::create_runner(ro));
  rep.runner_name = runner->name();
  rep.tolerance = o.tolerance >= 0 ? o.tolerance : check::default_tolerance(*runner);
  // The official format carries no ids: they come from the fixture's own reference.safetensors.
  const std::string ids_path = (std::filesystem::path(o.model_dir) / "reference.safetensors").string();
  std::optional<io::SafetensorsFile> ids;
  if (rep.reference_path != ids_path && std::filesystem::exists(ids_path)) {
    DSI_ASSIGN_OR_RETURN(io::SafetensorsFile f, io::SafetensorsFile::open(ids_path));
    ids.emplace(std::move(f));
  }
  if (!(o.min_greedy_match >= 0 && o.min_greedy_match <= 1))
    return Status::errorf("check_reference: min_greedy_match {} is not a fraction in [0, 1]", o.min_greedy_match);
  DSI_ASSIGN_OR_RETURN(check::ReferenceCheck res,
                       check::check_reference(*runner, ref, rep.tolerance, !o.dump_logits_path.empty(), ids ? &*ids : nullptr,
                                              o.min_greedy_match));
  for (const check::PromptCheck& p : res.prompts) {
    rep.prompts.push_back({int64_t(p.index), p.len, p.rel_err, p.p99_rel_err, int64_t(p.greedy_matched),
                           int64_t(p.greedy_total), p.logits_ok, p.ok});
    rep.greedy_matched += int64_t(p.greedy_matched);
    rep.greedy_total += int64_t(p.greedy_total);
  }
  rep.min_greedy_match = o.min_greedy_match;
  rep.ok = res.ok();
  if (!o.dump_logits_path.empty()) DSI_RETURN_IF_ERROR(io::write_safetensors(o.dump_logits_path, res.computed));
  return Status::ok();
}

Status run_bench_impl(const BenchOptions& o, BenchReport& rep) {
  if (o.model_dir.empty()) return Status::error("run_bench: no model directory given");
  rep.model_dir = o.model_dir;
  DSI_RETURN_IF_ERROR(perf::validate_bench_options(o));
  DSI_ASSIGN_OR_RETURN(runner::RunnerOptions ro,
                       runner::runner_options(o.model_dir, o.backend, o.numerics, o.load_format));
  ro.num_layers = o.num_layers;
  ro.gpus = o.gpus;
  ro.communicator = o.communicator;
  ro.data_parallel_size = o.data_parallel_size;
  ro.tensor_parallel_size = o.tensor_parallel_size;
  ro.batch_invariant = o.batch_invariant;
  DSI_ASSIGN_OR_RETURN(ro.engram_placement, model::parse_engram_placement(o.engram_placement));
  ro.fp8_state = o.state_format == "auto";
  // The ceilings are measured before the runner takes the device memory (about 2 GiB, freed again); without a GPU
  // (the cpu backend, which then reports that it cannot time ops) they stay the nominal ones, marked so.
  perf::Ceilings ceilings;
  if (o.ceilings == "measured") {
    ceilings.source = "nominal (no GPU to measure)";
#if DSINFER_HAS_CUDA
    if (ro.backend == runner::Backend::kCuda) {
      DSI_ASSIGN_OR_RETURN(ceilings, perf::measure_ceilings());
    }
#endif
  }
  DSI_ASSIGN_OR_RETURN(auto runner, engine::create_runner(ro));
  return perf::run_bench(*runner, o, ceilings, rep);
}

}  // namespace

bool check_reference(const CheckReferenceOptions& options, CheckReferenceReport* report, std::string* error) {
  CheckReferenceReport local;
  CheckReferenceReport& rep = report ? *report : local;
  rep = CheckReferenceReport{};
  if (Status s = run_check(options, rep); !s) return fail(s, error);
  return true;
}

bool run_bench(const BenchOptions& options, BenchReport* report, std::string* error) {
  BenchReport local;
  BenchReport& rep = report ? *report : local;
  rep = BenchReport{};
  if (Status s = run_bench_impl(options, rep); !s) return fail(s, error);
  return true;
}

bool plan_memory(const MemoryPlanOptions& o, MemoryPlan* plan, std::string* error) {
  auto run = [&]() -> Status {
    // Messages name the option; the caller (`dsinfer plan`) adds its own prefix.
    if (!(o.gpu_memory_gib > 0)) return Status::errorf("gpu memory must be > 0 GiB, found {}", o.gpu_memory_gib);
    if (o.context < 0) return Status::errorf("context must be >= 1 token (or 0 for the model's maximum), found {}", o.context);
    if (o.gpus.empty()) return Status::error("no GPU counts given");
    DSI_ASSIGN_OR_RETURN(const io::ModelConfig cfg, io::load_model_config(o.model_dir));
    if (cfg.max_position_embeddings > 0 && o.context > cfg.max_position_embeddings)
      return Status::errorf("context {} exceeds the model's max_position_embeddings {}", o.context,
                            cfg.max_position_embeddings);
    const int64_t context = o.context > 0 ? o.context : cfg.max_position_embeddings;
    if (context < 1)
      return Status::errorf("{}: no max_position_embeddings in config.json; give the context (--context N)", o.model_dir);
    const bool v41 = cfg.is_v41();
    const std::vector<model::TensorSpec> specs = v41 ? model::weight_specs_v41(cfg) : model::weight_specs(cfg);
    auto* bytes = v41 ? &model::official_storage_bytes_v41 : &parallel::storage_bytes;
    MemoryPlan p;
    p.model_type = v41 ? "deepseek_v41" : "deepseek_v4";
    p.layers = cfg.num_hidden_layers;
    p.context = context;
    const parallel::RankMemory all = parallel::rank_memory(specs, 1, 0, bytes);
    p.dense_bytes = all.dense_bytes;
    p.expert_bytes = all.expert_bytes;
    for (const model::TensorSpec& s : specs)
      if (model::is_engram_table(s)) {
        p.engram_table_bytes += bytes(s);
        p.engram_bytes_per_token += bytes(s) / double(s.rows) * double((cfg.v41.engram_max_ngram_size - 1) * cfg.v41.engram_n_heads);
      }
    cache::StateCacheConfig cc;
    cc.max_model_len = context;
    cc.max_num_seqs = 1;
    cc.kv_elem_bytes = 4;
    const cache::StateSizes sizes = cache::compute_state_sizes(cfg, cc);
    DSI_ASSIGN_OR_RETURN(const cache::StateLayout layout, cache::compute_state_layout(cfg, cc));
    p.state_bytes_per_token = sizes.bytes_per_token;
    p.state_fixed_bytes = double(sizes.fixed_bytes());
    p.state_bytes_per_sequence = double(layout.bytes_per_sequence(context));
    // The FP8 storage format where it applies (V4 head shapes with whole 64-channel NoPE tiles; not the small
    // test models): otherwise its fields stay 0 and `plan` prints no FP8 line.
    const Result<cache::StateSizes> fp8 = cache::compute_state_sizes_in(cfg, cc, cache::StateFormat::kFp8);
    if (fp8.is_ok()) {
      p.state_fp8_bytes_per_token = fp8.value().bytes_per_token;
      p.state_fp8_fixed_bytes = double(fp8.value().fixed_bytes());
      p.state_fp8_bytes_per_sequence = cache::state_bytes_per_sequence(fp8.value(), context, layout.block_size);
    }
    const double limit = parallel::kWeightFraction * o.gpu_memory_gib * double(int64_t(1) << 30);
    if (o.step_tokens < 1) return Status::errorf("step tokens {} must be >= 1", o.step_tokens);
    int64_t rows = 1;  // logits of the largest decode batch asked about
    for (const int64_t b : o.batches) rows = std::max(rows, b);
    const parallel::StepShape step{o.step_tokens, std::min(o.step_tokens, rows), false};
    for (const int32_t n : o.gpus) {
      if (n < 1) return Status::errorf("GPU count {} must be >= 1", n);
      if (o.redundant_experts % n != 0)
        return Status::errorf("--num-redundant-experts {} is not a multiple of {} GPUs", o.redundant_experts, n);
      DSI_RETURN_IF_ERROR(parallel::expert_range(cfg.n_routed_experts, 0, n).status());  // an even split
      MemoryPlanRow r;
      r.gpus = n;
      r.weight_bytes = parallel::rank_memory(specs, n, o.redundant_experts, bytes).weight_bytes();
      r.tables_split_bytes = r.weight_bytes - p.engram_table_bytes * (1.0 - 1.0 / double(n));
      r.tables_host_bytes = r.weight_bytes - p.engram_table_bytes;
      r.limit_bytes = limit;
      r.activation_bytes = parallel::step_activation_bytes(cfg, parallel::Layout::kExpertParallel, n, step);
      r.activation_bytes_dp = parallel::step_activation_bytes(cfg, parallel::Layout::kDataParallel, n, step);
      const double left = r.limit_bytes - r.weight_bytes - r.activation_bytes;  // for state, per GPU
      const double left_dp = r.limit_bytes - r.weight_bytes - r.activation_bytes_dp;
      r.fits = left >= 0;
      r.sequences = r.fits ? int64_t(left / p.state_bytes_per_sequence) : 0;
      if (p.state_fp8_bytes_per_sequence > 0)
        r.sequences_fp8 = r.fits ? int64_t(left / p.state_fp8_bytes_per_sequence) : 0;
      r.sequences_ep = r.sequences;
      r.sequences_dp = left_dp >= 0 ? int64_t(left_dp / p.state_bytes_per_sequence) * n : 0;
      r.state_left_sharded = std::max(0.0, limit - r.tables_split_bytes - r.activation_bytes);
      r.state_left_host = std::max(0.0, limit - r.tables_host_bytes - r.activation_bytes);
      r.sequences_sharded = int64_t(r.state_left_sharded / p.state_bytes_per_sequence);
      r.sequences_host = int64_t(r.state_left_host / p.state_bytes_per_sequence);
      for (const int64_t batch : o.batches) {
        if (batch < 1) return Status::errorf("batch {} must be >= 1", batch);
        const parallel::LayoutChoice c = parallel::choose_layout(cfg, specs, bytes, n, batch, context, r.sequences,
                                                                 r.sequences_dp / n);
        LayoutPlanChoice out{batch, {}, c.best, c.reason};
        for (const parallel::LayoutEstimate& e : c.options)
          out.options.push_back({parallel::layout_name(e.layout), parallel::layout_flags(e.layout), e.fits,
                                 e.sequences_fit, e.seqs_per_rank, e.collectives, e.comm_bytes, e.attn_weight_bytes,
                                 e.attn_state_bytes, e.attn_ms, e.comm_ms, e.step_ms()});
        r.layouts.push_back(std::move(out));
      }
      p.rows.push_back(r);
    }
    *plan = std::move(p);
    return Status::ok();
  };
  const Status s = run();
  return s.is_ok() || fail(s, error);
}

bool convert_checkpoint(const ConvertOptions& o, std::string* error) {
  auto run = [&]() -> Status {
    if (o.out_dir.empty()) return Status::error("no output folder given");
    if (o.model_dir.empty() == o.config.empty()) return Status::error("give either a model folder or a config to fill");
    if (o.shard_bytes < 1 || o.threads < 1) return Status::errorf("shard bytes {} / threads {} must be >= 1", o.shard_bytes, o.threads);
    if (!o.model_dir.empty() && !o.set.empty()) return Status::error("overrides apply to a config with random values only");
    if (!o.model_dir.empty()) return model::convert_checkpoint_v41(o.model_dir, o.out_dir, o.shard_bytes, o.threads);
    return model::write_random_checkpoint_v41(o.config, o.set, o.seed, o.out_dir, o.shard_bytes, o.threads);
  };
  const Status s = run();
  return s.is_ok() || fail(s, error);
}

}  // namespace dsinfer
