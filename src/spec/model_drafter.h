// Drafters that run a model: `draft` (a second, smaller model with the same
// vocabulary) and `layers` (self-speculation: the target itself with a set of
// layers skipped, for when no second model exists).
//
// Either way the drafter keeps its own paged KV cache, one block table per
// sequence, and proposes greedily (its argmax: a point mass, so the target's
// rejection sampling stays exact). One propose() call serves every
// speculating sequence of a step at once:
//
//   1. catch up: each sequence's tokens the drafter has not computed yet
//      (a new prompt, the tokens the target accepted last step) run in one
//      ragged batch, chunked to max_batch_tokens;
//   2. draft: one batched forward pass per draft position, every sequence
//      still drafting contributing one token.
//
// Rollback follows the target lazily: the cache holds the tokens it
// computed (including last step's drafts); at the next call the longest
// common prefix with the sequence's real tokens is kept and the rest of the
// block table truncated, its blocks returned. When the pool is short the
// tables of sequences not asking this step are freed first (they are
// rebuilt by catching up), then the sequence that does not fit drafts
// nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "spec/drafter.h"

namespace tessera::spec {

struct ModelDrafterOptions {
  int64_t capacity_tokens = 0;     // KV slots over all sequences (rounded up to blocks)
  int32_t block_size = 16;
  DType kv_type = DType::kF16;
  bool kv_hadamard = false;  // Hadamard-rotated q8_0 / q4_0 K and V (kernels/attention.h)
  int64_t max_batch_tokens = 512;  // tokens per catch-up forward pass
  std::vector<uint8_t> skip_layers;  // [n_layer] 0/1: layers left out (empty: none)
};

// `model` (and `pool`) must outlive the drafter. The name is "draft", or
// "layers" when layers are skipped.
std::unique_ptr<Drafter> make_model_drafter(const Model& model, const ModelDrafterOptions& options, ThreadPool& pool);

// Parses "3,4,5" or "2-5" or "1,3-4" (0-based layer indices) into a
// [n_layer] mask; throws Error(kInvalidArgument) naming a bad entry, an
// index out of range, or a set that skips every layer.
std::vector<uint8_t> parse_layer_list(const std::string& list, int64_t n_layer);

// Self-speculation's default layer set, chosen from measured acceptance:
// the target reads `text` (teacher forced, one forward pass); each candidate
// set (contiguous runs of the middle layers, a quarter to a half of them) is
// scored by how often its argmax agrees with the target's at each position
// (what greedy verification accepts), and the set with the best predicted
// speed-up (Leviathan et al.'s formula at its best k up to 8, a drafted
// token costing the kept layers' share of a target step) wins. Empty when
// none is predicted to pay.
struct LayerChoice {
  std::vector<uint8_t> skip;  // the chosen mask (empty: none pays)
  double acceptance = 0.0;    // the best candidate's measured agreement
  double predicted_speedup = 0.0;  // and its predicted speed-up (0: nothing measured)
};
LayerChoice choose_layers_to_skip(const Model& model, ThreadPool& pool, std::span<const int32_t> text);

// How often a draft model's (or the target's own, `draft_skip` layers left
// out) argmax agrees with the target's over `text`, teacher forced, position
// by position: greedy verification's per-token acceptance on that text. The
// engine measures it at start for a drafter it was told to use, so that its
// first drafts are sized from a measurement, not a guess.
double measure_agreement(const Model& target, const Model& draft, const std::vector<uint8_t>& draft_skip,
                         ThreadPool& pool, std::span<const int32_t> text);

// English prose to measure agreement on when the caller has no text of its
// own (encode it with the model's tokenizer).
extern const char* const kLayerProbeText;

}  // namespace tessera::spec
