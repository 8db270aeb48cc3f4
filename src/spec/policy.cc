#include "spec/policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace tessera::spec {

void StepCost::observe(int64_t tokens, double seconds) {
  auto [it, inserted] = points_.try_emplace(tokens, seconds);
  if (!inserted) it->second = 0.8 * it->second + 0.2 * seconds;
}

void StepCost::observe_overhead(int64_t rows, double seconds) {
  if (rows <= 0) return;
  const double v = std::max(0.0, seconds) / static_cast<double>(rows);
  per_row_ = have_overhead_ ? 0.9 * per_row_ + 0.1 * v : v;
  have_overhead_ = true;
}

void StepCost::observe_draft(int64_t drafted, double seconds) {
  if (drafted <= 0) return;
  const double v = std::max(0.0, seconds) / static_cast<double>(drafted);
  draft_per_token_ = have_draft_ ? 0.8 * draft_per_token_ + 0.2 * v : v;
  have_draft_ = true;
}

double StepCost::predict(int64_t tokens) const {
  // Never below a smaller size's: sizes are observed unevenly (decode steps
  // of 1 token every step, others rarely), and a step of 1 measured slower
  // than the start-up figure for 2 must not make a draft token look free.
  double floor = 0.0;
  for (auto it = points_.begin(); it != points_.end() && it->first <= tokens; ++it) floor = std::max(floor, it->second);
  return std::max(floor, interpolate(tokens));
}

double StepCost::interpolate(int64_t tokens) const {
  if (points_.empty()) return 0.0;
  auto hi = points_.lower_bound(tokens);
  if (hi != points_.end() && hi->first == tokens) return hi->second;
  if (hi == points_.begin()) return hi->second * static_cast<double>(tokens) / static_cast<double>(hi->first);
  auto lo = std::prev(hi);
  if (hi == points_.end()) {
    // Past the largest size: the slope of the last two sizes (compute-bound
    // territory), at least proportional growth's lower bound of zero.
    if (lo == points_.begin()) return lo->second * static_cast<double>(tokens) / static_cast<double>(lo->first);
    auto lo2 = std::prev(lo);
    const double slope = std::max(0.0, (lo->second - lo2->second) / static_cast<double>(lo->first - lo2->first));
    return lo->second + slope * static_cast<double>(tokens - lo->first);
  }
  const double f = static_cast<double>(tokens - lo->first) / static_cast<double>(hi->first - lo->first);
  return lo->second + f * (hi->second - lo->second);
}

void Acceptance::update(int64_t drafted, int64_t accepted_now, double decay) {
  // Positions up to and including the first rejection were trials.
  const int64_t t = accepted_now < drafted ? accepted_now + 1 : drafted;
  accepted = decay * accepted + static_cast<double>(accepted_now);
  trials = decay * trials + static_cast<double>(t);
}

double expected_extra_tokens(double a, int64_t k) {
  if (k <= 0 || a <= 0.0) return 0.0;
  if (a >= 1.0) return static_cast<double>(k);
  return a * (1.0 - std::pow(a, static_cast<double>(k))) / (1.0 - a);
}

double setup_share(const DraftCandidate& d, int64_t k) {
  if (d.setup_seconds <= 0.0 || k <= 0) return 0.0;
  const double steps = static_cast<double>(std::max<int64_t>(d.remaining, 1)) / (1.0 + expected_extra_tokens(d.acceptance, k));
  return d.setup_seconds / std::max(steps, 1.0);
}

void choose_draft_lengths(const StepCost& cost, int64_t base_tokens, int64_t base_outputs,
                          std::span<DraftCandidate> c, double min_gain) {
  for (DraftCandidate& d : c) d.k = 0;
  if (cost.empty()) return;
  std::vector<size_t> order(c.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return c[a].acceptance > c[b].acceptance; });
  int64_t tokens = base_tokens;
  int64_t rows = std::max<int64_t>(base_outputs, 1);  // a draft of k adds k tokens and k rows
  int64_t drafted = 0;                                 // (and k proposed tokens)
  double outputs = static_cast<double>(std::max<int64_t>(base_outputs, 1));
  double setup = 0.0;  // the chosen candidates' setup shares
  // Prompt tokens in the step (base_tokens beyond one per decoding sequence)
  // are work done either way: their time is taken out, so that drafts are
  // judged against what the decoding sequences' own step costs. Otherwise
  // a step carrying a long prefill makes any draft look nearly free.
  const int64_t decode_tokens = std::min(base_tokens, std::max<int64_t>(base_outputs, 1));
  const double sunk = std::max(0.0, cost.predict(base_tokens, rows) - cost.predict(decode_tokens, rows));
  double rate = outputs / std::max(cost.predict(tokens, rows) - sunk, 1e-12);
  for (size_t i : order) {
    DraftCandidate& d = c[i];
    int64_t best_k = 0;
    double best_rate = rate * min_gain;
    for (int64_t k = 1; k <= d.max_k; ++k) {
      const double r = (outputs + expected_extra_tokens(d.acceptance, k)) /
                       std::max(cost.predict(tokens + k, rows + k, drafted + k) - sunk + setup + setup_share(d, k), 1e-12);
      if (r > best_rate) {
        best_rate = r;
        best_k = k;
      }
    }
    if (best_k == 0) continue;
    d.k = best_k;
    tokens += best_k;
    rows += best_k;
    drafted += best_k;
    setup += setup_share(d, best_k);
    outputs += expected_extra_tokens(d.acceptance, best_k);
    rate = best_rate;
  }
}

}  // namespace tessera::spec
