// StepCostModel (see step_cost.h).
#include "speculative/step_cost.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace dsinfer::speculative {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace

Status StepCostModel::check(const StepCostModel& m, const std::string& where) {
  if (m.max_rows_ < 1 || m.max_rows_ > 64)
    return Status::errorf("{}: rows must be in [1, 64], found {}", where, m.max_rows_);
  if (m.seqs_.empty()) return Status::errorf("{}: no batch size profiled", where);
  for (size_t i = 0; i < m.seqs_.size(); ++i)
    if (m.seqs_[i] < 1 || (i > 0 && m.seqs_[i] <= m.seqs_[i - 1]))
      return Status::errorf("{}: batch sizes must be ascending and >= 1, found {} after {}", where, m.seqs_[i],
                            i > 0 ? m.seqs_[i - 1] : 0);
  if (m.ms_.size() != m.seqs_.size() * size_t(m.max_rows_))
    return Status::errorf("{}: {} times for {} batch sizes x {} rows", where, m.ms_.size(), m.seqs_.size(),
                          m.max_rows_);
  if (!m.draft_ms_.empty() && m.draft_ms_.size() != m.seqs_.size())
    return Status::errorf("{}: {} draft times for {} batch sizes", where, m.draft_ms_.size(), m.seqs_.size());
  if (!m.plain_ms_.empty() && m.plain_ms_.size() != m.seqs_.size())
    return Status::errorf("{}: {} plain step times for {} batch sizes", where, m.plain_ms_.size(), m.seqs_.size());
  for (double d : m.plain_ms_)
    if (!(std::isfinite(d) && d > 0))
      return Status::errorf("{}: plain step times must be finite and > 0, found {}", where, d);
  if (!m.round_ms_.empty() && m.round_ms_.size() != m.seqs_.size())
    return Status::errorf("{}: {} round times for {} batch sizes", where, m.round_ms_.size(), m.seqs_.size());
  for (double d : m.round_ms_)
    if (!(std::isfinite(d) && d > 0))
      return Status::errorf("{}: round times must be finite and > 0, found {}", where, d);
  if (!(std::isfinite(m.host_row_ms_) && m.host_row_ms_ >= 0))
    return Status::errorf("{}: the host time per row must be finite and >= 0, found {}", where, m.host_row_ms_);
  for (double d : m.draft_ms_)
    if (!(std::isfinite(d) && d >= 0))
      return Status::errorf("{}: draft times must be finite and >= 0, found {}", where, d);
  for (size_t c = 0; c < m.ms_.size(); ++c)
    if (!(std::isfinite(m.ms_[c]) && m.ms_[c] > 0))
      return Status::errorf("{}: step time of {} sequences x {} rows must be finite and > 0, found {}", where,
                            m.seqs_[c / size_t(m.max_rows_)], c % size_t(m.max_rows_) + 1, m.ms_[c]);
  return Status::ok();
}

Result<StepCostModel> StepCostModel::fit(std::string key, std::vector<int64_t> seqs, int32_t max_rows,
                                         const std::vector<std::vector<double>>& samples,
                                         const std::vector<std::vector<double>>& draft_samples,
                                         const std::vector<double>& host_row_samples,
                                         const std::vector<std::vector<double>>& plain_samples,
                                         const std::vector<std::vector<double>>& round_samples) {
  StepCostModel m;
  m.key_ = std::move(key);
  m.seqs_ = std::move(seqs);
  m.max_rows_ = max_rows;
  if (samples.size() != m.seqs_.size() * size_t(std::max(max_rows, 0)))
    return Status::errorf("step cost fit: {} cells of samples for {} batch sizes x {} rows", samples.size(),
                          m.seqs_.size(), max_rows);
  for (size_t c = 0; c < samples.size(); ++c) {
    if (samples[c].empty())
      return Status::errorf("step cost fit: no timing of {} sequences x {} rows", m.seqs_[c / size_t(max_rows)],
                            c % size_t(max_rows) + 1);
    m.ms_.push_back(median(samples[c]));
  }
  for (size_t i = 0; i < draft_samples.size(); ++i) {
    if (draft_samples[i].empty()) return Status::errorf("step cost fit: no drafting time of batch size index {}", i);
    m.draft_ms_.push_back(std::max(median(draft_samples[i]), m.draft_ms_.empty() ? 0.0 : m.draft_ms_.back()));
  }
  for (size_t i = 0; i < plain_samples.size(); ++i) {
    if (plain_samples[i].empty()) return Status::errorf("step cost fit: no plain step time of batch size index {}", i);
    m.plain_ms_.push_back(std::max(median(plain_samples[i]), m.plain_ms_.empty() ? 0.0 : m.plain_ms_.back()));
  }
  for (size_t i = 0; i < round_samples.size(); ++i) {
    if (round_samples[i].empty()) return Status::errorf("step cost fit: no round time of batch size index {}", i);
    m.round_ms_.push_back(std::max(median(round_samples[i]), m.round_ms_.empty() ? 0.0 : m.round_ms_.back()));
  }
  if (!host_row_samples.empty()) m.host_row_ms_ = median(host_row_samples);
  DSI_RETURN_IF_ERROR(check(m, "step cost fit"));
  const size_t R = size_t(max_rows);
  for (size_t i = 0; i < m.seqs_.size(); ++i)
    for (size_t r = 0; r < R; ++r) {
      double& x = m.ms_[i * R + r];
      if (r > 0) x = std::max(x, m.ms_[i * R + r - 1]);
      if (i > 0) x = std::max(x, m.ms_[(i - 1) * R + r]);
    }
  return m;
}

StepCostModel StepCostModel::proportional(int64_t max_seqs, int32_t max_rows) {
  StepCostModel m;
  m.key_ = "proportional (cpu fallback: time = sequences x rows)";
  m.max_rows_ = std::max(max_rows, 1);
  for (int64_t n : {int64_t(1), std::max<int64_t>(2, max_seqs)}) {
    m.seqs_.push_back(n);
    for (int32_t r = 1; r <= m.max_rows_; ++r) m.ms_.push_back(double(n) * double(r));
  }
  return m;
}

std::string StepCostModel::serialize() const {
  std::ostringstream o;
  o.precision(9);
  o << "dsinfer-step-cost 1\nkey " << key_ << "\nrows " << max_rows_ << "\n";
  for (size_t i = 0; i < seqs_.size(); ++i) {
    o << "seqs " << seqs_[i];
    for (int32_t r = 1; r <= max_rows_; ++r) o << ' ' << cell(i, r);
    o << '\n';
  }
  if (!draft_ms_.empty()) {
    o << "draft";
    for (double d : draft_ms_) o << ' ' << d;
    o << '\n';
  }
  if (host_row_ms_ > 0) o << "host " << host_row_ms_ << '\n';
  if (!plain_ms_.empty()) {
    o << "plain";
    for (double d : plain_ms_) o << ' ' << d;
    o << '\n';
  }
  if (!round_ms_.empty()) {
    o << "round";
    for (double d : round_ms_) o << ' ' << d;
    o << '\n';
  }
  return o.str();
}

Result<StepCostModel> StepCostModel::parse(std::string_view text, const std::string& where) {
  StepCostModel m;
  std::istringstream in{std::string(text)};
  std::string line;
  int64_t ln = 0;
  bool header = false, rows = false;
  while (std::getline(in, line)) {
    ++ln;
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string word;
    ls >> word;
    if (!header) {
      int v = 0;
      if (word != "dsinfer-step-cost" || !(ls >> v) || v != 1)
        return Status::errorf("{}:{}: expected 'dsinfer-step-cost 1'", where, ln);
      header = true;
    } else if (word == "key") {
      m.key_ = line.size() > 4 ? line.substr(4) : "";
    } else if (word == "rows") {
      if (!(ls >> m.max_rows_) || m.max_rows_ < 1 || m.max_rows_ > 64)
        return Status::errorf("{}:{}: 'rows' needs a count in [1, 64]", where, ln);
      rows = true;
    } else if (word == "seqs") {
      int64_t n = 0;
      if (!rows) return Status::errorf("{}:{}: 'seqs' before 'rows'", where, ln);
      if (!(ls >> n)) return Status::errorf("{}:{}: 'seqs' needs a batch size", where, ln);
      m.seqs_.push_back(n);
      for (int32_t r = 0; r < m.max_rows_; ++r) {
        double t = 0;
        if (!(ls >> t)) return Status::errorf("{}:{}: {} rows need {} times", where, ln, m.max_rows_, m.max_rows_);
        m.ms_.push_back(t);
      }
      if (ls >> word) return Status::errorf("{}:{}: more than {} times", where, ln, m.max_rows_);
    } else if (word == "draft") {
      double t = 0;
      while (ls >> t) m.draft_ms_.push_back(t);
      if (!ls.eof()) return Status::errorf("{}:{}: 'draft' needs times in ms", where, ln);
    } else if (word == "plain") {
      double t = 0;
      while (ls >> t) m.plain_ms_.push_back(t);
      if (!ls.eof()) return Status::errorf("{}:{}: 'plain' needs times in ms", where, ln);
    } else if (word == "round") {
      double t = 0;
      while (ls >> t) m.round_ms_.push_back(t);
      if (!ls.eof()) return Status::errorf("{}:{}: 'round' needs times in ms", where, ln);
    } else if (word == "host") {
      if (!(ls >> m.host_row_ms_) || (ls >> word)) return Status::errorf("{}:{}: 'host' needs one time in ms", where, ln);
    } else {
      return Status::errorf("{}:{}: unknown entry '{}'", where, ln, word);
    }
  }
  if (!header) return Status::errorf("{}: empty step cost file", where);
  DSI_RETURN_IF_ERROR(check(m, where));
  return m;
}

template <typename At>
double StepCostModel::along_seqs(int64_t n, At at) const {
  n = std::max<int64_t>(n, 1);
  auto it = std::lower_bound(seqs_.begin(), seqs_.end(), n);
  if (it != seqs_.end() && *it == n) return at(size_t(it - seqs_.begin()));
  if (it == seqs_.begin()) return at(0) * double(n) / double(seqs_[0]);  // below the grid (n < seqs[0])
  const size_t hi = size_t(it - seqs_.begin());
  if (hi == seqs_.size()) {  // beyond the grid: the last slope (or proportional with one point)
    const size_t l = seqs_.size() - 1;
    if (l == 0) return at(0) * double(n) / double(seqs_[0]);
    const double slope = (at(l) - at(l - 1)) / double(seqs_[l] - seqs_[l - 1]);
    return at(l) + slope * double(n - seqs_[l]);
  }
  const size_t lo = hi - 1;
  const double f = double(n - seqs_[lo]) / double(seqs_[hi] - seqs_[lo]);
  return at(lo) + f * (at(hi) - at(lo));
}

double StepCostModel::step_ms(int64_t n, int32_t rows) const {
  if (seqs_.empty()) return 1.0;
  rows = std::max(rows, 1);
  const double scale = rows > max_rows_ ? double(rows) / double(max_rows_) : 1.0;
  const int32_t r = std::min(rows, max_rows_);
  return scale * along_seqs(n, [&](size_t i) { return cell(i, r); });
}

double StepCostModel::plain_ms(int64_t n) const {
  if (plain_ms_.empty()) return step_ms(n, 1);
  return along_seqs(n, [&](size_t i) { return plain_ms_[i]; });
}

double StepCostModel::round_ms(int64_t n, int32_t rows, double tokens) const {
  const double host = host_row_ms_ * tokens;
  if (round_ms_.empty()) return step_ms(n, rows) + draft_ms(n) + host;
  const double round = along_seqs(n, [&](size_t i) { return round_ms_[i]; });
  return std::max(round - step_ms(n, max_rows_) + step_ms(n, rows), step_ms(n, rows)) + (round_host_ ? host : 0.0);
}

StepCostModel StepCostModel::without_round() const {
  StepCostModel m = *this;
  m.round_ms_.clear();
  return m;
}

StepCostModel StepCostModel::without_round_host() const {
  StepCostModel m = *this;
  m.round_host_ = false;
  return m;
}

double StepCostModel::draft_ms(int64_t n) const {
  if (draft_ms_.empty()) return 0.0;
  return along_seqs(n, [&](size_t i) { return draft_ms_[i]; });
}

}  // namespace dsinfer::speculative
