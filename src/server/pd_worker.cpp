// PdWorker (see pd_worker.h).
#include "server/pd_worker.h"

#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dsinfer::server {

using json = nlohmann::ordered_json;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result<kv_transfer::SenderFaults> parse_faults(const std::string& spec) {
  kv_transfer::SenderFaults f;
  if (spec.empty()) return f;
  if (spec == "stall") {
    f.stall = true;
    return f;
  }
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  int64_t n = -1;
  try {
    if (colon != std::string::npos) n = std::stoll(spec.substr(colon + 1));
  } catch (const std::exception&) {
    n = -1;
  }
  if (n < 0 || (kind != "truncate" && kind != "corrupt"))
    return Status::errorf("kv_transfer_fault '{}': expected 'truncate:N', 'corrupt:N' or 'stall'", spec);
  (kind == "truncate" ? f.truncate_after : f.corrupt_byte) = n;
  return f;
}

}  // namespace

Result<PdRole> parse_pd_role(const std::string& name) {
  if (name == "both") return PdRole::kBoth;
  if (name == "prefill") return PdRole::kPrefill;
  if (name == "decode") return PdRole::kDecode;
  return Status::errorf("role '{}': expected prefill, decode or both", name);
}

Result<PdTransport> parse_pd_transport(const std::string& name) {
  if (name == "tcp") return PdTransport::kTcp;
  if (name != "ucx") return Status::errorf("kv_transfer_backend '{}': expected tcp or ucx", name);
  DSI_RETURN_IF_ERROR(kv_transfer::ucx_available());
  return PdTransport::kUcx;
}

const char* pd_role_name(PdRole r) {
  return r == PdRole::kPrefill ? "prefill" : r == PdRole::kDecode ? "decode" : "both";
}

PdWorker::PdWorker(const ServerOptions& opts) : opts_(opts) {}

PdWorker::~PdWorker() { stop(); }

bool PdWorker::start(std::string* error) {
  const Status s = [&]() -> Status {
    DSI_ASSIGN_OR_RETURN(role_, parse_pd_role(opts_.role));
    DSI_ASSIGN_OR_RETURN(const kv_transfer::SenderFaults faults, parse_faults(opts_.kv_transfer_fault));
    if (!(opts_.kv_transfer_ttl_s > 0) || !(opts_.kv_transfer_timeout_s > 0))
      return Status::errorf("kv_transfer_ttl_s ({}) and kv_transfer_timeout_s ({}) must be > 0", opts_.kv_transfer_ttl_s,
                            opts_.kv_transfer_timeout_s);
    if (role_ == PdRole::kBoth) return Status::ok();
    DSI_ASSIGN_OR_RETURN(transport_, parse_pd_transport(opts_.kv_transfer_backend));
    if (role_ != PdRole::kPrefill) return Status::ok();
    if (transport_ == PdTransport::kUcx)
      sender_ = std::make_unique<kv_transfer::UcxSender>();
    else
      sender_ = std::make_unique<kv_transfer::Sender>();
    sender_->set_faults(faults);
    std::string err;
    if (!sender_->start(opts_.kv_transfer_host, opts_.kv_transfer_port, &err))
      return Status::errorf("kv transfer ({}): {}", sender_->transport(), err);
    return Status::ok();
  }();
  if (!s && error) *error = s.message();
  return s.is_ok();
}

void PdWorker::stop() {
  if (sender_) sender_->stop();
}

std::string PdWorker::export_state(Engine& engine, const RequestResult& r) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string blob, err;
  if (!r.error.empty() || !engine.export_prefix_state(r.prompt_token_ids, &blob, &err)) {
    std::lock_guard<std::mutex> lk(mu_);
    ++exports_none_;
    return "null";
  }
  const std::string id = fmt::format("{}-{}", sender_->port(), next_id_++);
  const size_t bytes = blob.size();
  sender_->offer(id, std::move(blob), opts_.kv_transfer_ttl_s);
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++exports_ok_;
    exported_bytes_ += bytes;
  }
  // vLLM's fields (remote_block_ids stays null: the state moves as one blob), then dsinfer's timing for the split.
  return json{{"do_remote_prefill", true},
              {"do_remote_decode", false},
              {"remote_engine_id",
               fmt::format("dsinfer-{}-{}:{}", sender_->transport(), opts_.kv_transfer_host, sender_->port())},
              {"remote_host", opts_.kv_transfer_host},
              {"remote_port", sender_->port()},
              {"remote_request_id", id},
              {"remote_block_ids", nullptr},
              {"state_bytes", bytes},
              {"prefill_s", r.finish_s - r.arrival_s},
              {"export_s", since(t0)}}
      .dump();
}

std::string PdWorker::pull(const KvTransferParams& p, PdRecord* rec) {
  kv_transfer::TransferOptions o;
  o.total_timeout_s = opts_.kv_transfer_timeout_s;
  o.io_timeout_s = std::min(5.0, opts_.kv_transfer_timeout_s);
  o.connect_timeout_s = std::min(2.0, opts_.kv_transfer_timeout_s);
  kv_transfer::FetchResult f;
  if (p.remote_host.empty() || p.remote_port <= 0 || p.remote_request_id.empty())
    f.error = "kv_transfer_params name no remote_host / remote_port / remote_request_id";
  else if (transport_ == PdTransport::kUcx)
    f = kv_transfer::fetch_ucx(p.remote_host, p.remote_port, p.remote_request_id, o);
  else
    f = kv_transfer::fetch(p.remote_host, p.remote_port, p.remote_request_id, o);
  rec->wire_bytes = f.bytes_received;
  rec->transfer_s = f.seconds;
  rec->pulled = f.ok;
  if (!f.ok) rec->fallback = "pull: " + f.error;
  rec->state_bytes = f.blob.size();
  std::lock_guard<std::mutex> lk(mu_);
  ++(f.ok ? pulls_ok_ : pulls_failed_);
  pulled_bytes_ += f.bytes_received;
  transfer_s_ += f.seconds;
  return std::move(f.blob);
}

void PdWorker::import_state(Engine& engine, const std::string& blob, PdRecord* rec) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  const int64_t tokens = engine.import_prefix_state(blob, &err);
  rec->import_s = since(t0);
  rec->imported = tokens > 0;
  rec->state_tokens = tokens > 0 ? tokens : 0;
  if (tokens <= 0) rec->fallback = "import: " + err;
  std::lock_guard<std::mutex> lk(mu_);
  ++(tokens > 0 ? imports_ok_ : imports_failed_);
  imported_tokens_ += uint64_t(rec->state_tokens);
}

std::string PdWorker::metrics_text() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string m = fmt::format("# HELP dsinfer_kv_transfer_role This server's P/D role (serve --role).\n"
                              "# TYPE dsinfer_kv_transfer_role gauge\ndsinfer_kv_transfer_role{{role=\"{}\"}} 1\n",
                              pd_role_name(role_));
  auto counter = [&](const char* name, const char* help, const std::string& labels, double v) {
    m += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0}{2} {3}\n", name, help, labels, v);
  };
  counter("dsinfer_kv_transfer_exports_total", "Prefix states exported for a decode worker.", "{result=\"ok\"}",
          double(exports_ok_));
  m += fmt::format("dsinfer_kv_transfer_exports_total{{result=\"none\"}} {}\n", exports_none_);
  counter("dsinfer_kv_transfer_exported_bytes_total", "Bytes of exported prefix state.", "", double(exported_bytes_));
  counter("dsinfer_kv_transfer_pulls_total", "Prefix-state pulls from a prefill worker.", "{result=\"ok\"}",
          double(pulls_ok_));
  m += fmt::format("dsinfer_kv_transfer_pulls_total{{result=\"failed\"}} {}\n", pulls_failed_);
  counter("dsinfer_kv_transfer_pulled_bytes_total", "Bytes read from prefill workers.", "", double(pulled_bytes_));
  counter("dsinfer_kv_transfer_pull_seconds_total", "Time spent pulling prefix state.", "", transfer_s_);
  counter("dsinfer_kv_transfer_imports_total", "Pulled prefix states imported into the prefix cache.",
          "{result=\"ok\"}", double(imports_ok_));
  m += fmt::format("dsinfer_kv_transfer_imports_total{{result=\"failed\"}} {}\n", imports_failed_);
  counter("dsinfer_kv_transfer_imported_tokens_total", "Prompt tokens a decode worker did not compute.", "",
          double(imported_tokens_));
  if (sender_)
    m += fmt::format("# HELP dsinfer_kv_transfer_held Exported states waiting for their pull.\n"
                     "# TYPE dsinfer_kv_transfer_held gauge\ndsinfer_kv_transfer_held {}\n",
                     sender_->held());
  return m;
}

}  // namespace dsinfer::server
