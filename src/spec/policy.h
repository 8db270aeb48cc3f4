// When to speculate, and how far. Verifying k drafted tokens costs a step
// of k more tokens; it pays when the tokens it is expected to add are worth
// more than that. Both sides are measured, never assumed:
//
//  - StepCost: seconds of a forward step as a function of the tokens in it
//    (start-up calibration at a few sizes, then every step's measured time,
//    an exponential average per size; linear between sizes). Decode is
//    memory-bound, so a few more tokens are nearly free at batch 1 and cost
//    their full compute share when the batch is already large.
//  - Acceptance: per sequence, the fraction of drafted tokens the target
//    accepted (each position a trial, counted until the first rejection),
//    decayed so that it follows the text, with the method's overall rate as
//    the prior.
//
// choose_draft_lengths() then gives drafts, greedily by acceptance, only
// while the step's expected output tokens per second rises (the forward
// pass's cost, the measured per-row cost of the rest of the step, a model
// drafter's time per drafted token and its share of catching up on a
// sequence it has not read): at batch 1 with
// good drafts that is long drafts; under load, or with poor drafts, none.
// Expected tokens of a draft of k with per-token acceptance a (Leviathan et
// al. 2023): 1 + a + ... + a^k, i.e. a(1 - a^k)/(1 - a) more than without.
#pragma once

#include <cstdint>
#include <map>
#include <span>

namespace tessera::spec {

class StepCost {
 public:
  // A measured time for a step of `tokens` (calibration: replaces).
  void set(int64_t tokens, double seconds) { points_[tokens] = seconds; }
  // A step's measured time: averaged into its size.
  void observe(int64_t tokens, double seconds);
  // Predicted seconds of the forward pass of a step of `tokens` (0 when
  // nothing is known).
  double predict(int64_t tokens) const;
  // The rest of a step (sampling, drafting, bookkeeping), measured per
  // logit row: a step's measured time outside its forward pass over its rows.
  void observe_overhead(int64_t rows, double seconds);
  double overhead_per_row() const { return per_row_; }
  // A costly drafter's (a model's) measured time per proposed token.
  void observe_draft(int64_t drafted, double seconds);
  double draft_per_token() const { return draft_per_token_; }
  // A whole step: forward pass of `tokens`, the overhead of `rows`, and
  // drafting `drafted` tokens with a costly drafter.
  double predict(int64_t tokens, int64_t rows, int64_t drafted = 0) const {
    return predict(tokens) + per_row_ * static_cast<double>(rows) + draft_per_token_ * static_cast<double>(drafted);
  }
  bool empty() const { return points_.empty(); }

 private:
  double interpolate(int64_t tokens) const;

  std::map<int64_t, double> points_;
  double per_row_ = 0.0;
  bool have_overhead_ = false;
  double draft_per_token_ = 0.0;
  bool have_draft_ = false;
};

// Per-sequence acceptance, decayed.
struct Acceptance {
  double accepted = 0.0;
  double trials = 0.0;
  // A verify of `drafted` tokens of which the first `accepted` were taken.
  void update(int64_t drafted, int64_t accepted_now, double decay = 0.8);
  // Estimated per-token acceptance, `prior` weighing as `prior_trials` trials.
  double rate(double prior, double prior_trials = 2.0) const {
    return (accepted + prior * prior_trials) / (trials + prior_trials);
  }
};

// Extra tokens a verify of k drafts is expected to yield beyond the one a
// plain decode step yields.
double expected_extra_tokens(double acceptance, int64_t k);

struct DraftCandidate {
  double acceptance = 0.0;  // estimated per-token acceptance
  int64_t max_k = 0;        // proposal length available
  int64_t k = 0;            // chosen (out)
  // A one-time cost of drafting for this sequence at all (a model drafter
  // catching up on a prompt it has not read), spread over the verify steps
  // of the `remaining` tokens the sequence may still produce: the step pays
  // setup_seconds * (1 + expected extra tokens) / remaining of it.
  double setup_seconds = 0.0;
  int64_t remaining = 0;
};

// The share of `d`'s setup cost a step drafting k for it carries.
double setup_share(const DraftCandidate& d, int64_t k);

// Chooses each candidate's k (0: do not speculate) for a step that computes
// `base_tokens` tokens and samples `base_outputs` sequences without drafts:
// adds drafts while (outputs + expected extra) / cost(tokens) grows by at
// least `min_gain` per addition, where the cost of the step's prompt tokens
// (base_tokens beyond base_outputs) is left out: they are computed either
// way, and drafts must pay against the decoding sequences' own step.
void choose_draft_lengths(const StepCost& cost, int64_t base_tokens, int64_t base_outputs,
                          std::span<DraftCandidate> candidates, double min_gain);

}  // namespace tessera::spec
