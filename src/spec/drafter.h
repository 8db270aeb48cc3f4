// Speculative decoding's proposers. A drafter guesses the next tokens of
// running sequences; the target model verifies a whole guess in one forward
// pass (engine/engine.cc), and rejection sampling keeps the output exactly
// the target's (engine/sampler.h). Every drafter sits behind this interface:
//
//   ngram   prompt lookup: the last n tokens matched earlier in the sequence
//           (spec/ngram.cc)
//   suffix  SuffixDecoding: context frequencies over the request's tokens and
//           the outputs of recently finished requests (spec/suffix.cc)
//   draft   a smaller model with the same vocabulary, batched over every
//           speculating sequence, with its own paged KV (spec/model_drafter.h)
//   layers  self-speculation: the target itself with some layers skipped
//           (spec/model_drafter.h)
//
// Drafters know token ids only (no engine, no scheduler): tested alone.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tessera::spec {

// One sequence asking for a proposal.
struct DraftQuery {
  uint64_t id = 0;                  // the request (drafters with per-sequence state key on it)
  std::span<const int32_t> tokens;  // prompt + output so far
  int64_t num_prompt_tokens = 0;    // of which prompt
  int32_t max_tokens = 0;           // propose at most this many
  std::vector<int32_t>* out = nullptr;  // the proposal (cleared first; may stay empty)
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  // Proposals for every query of a step, at once (a model drafter batches).
  // Proposals are certain (q is a point mass on each proposed token).
  virtual void propose(std::span<const DraftQuery> queries) = 0;
  // A sequence is gone (finished); drafters with per-sequence state drop it.
  virtual void release(uint64_t /*id*/) {}
  // True when proposing costs forward passes (a model): the engine then
  // sizes each draft before asking (max_tokens is the chosen length) and
  // charges propose()'s measured time per proposed token in its cost model.
  // Cheap drafters are asked for their longest proposal and cut after.
  virtual bool costly() const { return false; }
  // Tokens a propose() for this sequence would compute before its first
  // draft (a model drafter's catch-up: a prompt it has not read, the tokens
  // accepted since it last drafted); 0 for drafters that compute nothing.
  virtual int64_t uncomputed_tokens(uint64_t /*id*/, std::span<const int32_t> /*tokens*/) const { return 0; }
};

// The methods `--spec` accepts.
enum class Method { kNone, kNgram, kSuffix, kDraft, kLayers };
// "none", "ngram", "suffix", "draft", "layers"; throws Error(kInvalidArgument) naming the known ones.
Method parse_method(const std::string& name);
const char* method_name(Method m);

struct NgramOptions {
  int32_t min_n = 2;  // shortest suffix matched
  int32_t max_n = 4;  // longest suffix matched (tried first)
};
std::unique_ptr<Drafter> make_ngram_drafter(const NgramOptions& options = {});

struct SuffixOptions {
  int32_t depth = 8;            // longest context indexed
  int32_t min_n = 2;            // shortest context a draft may follow
  double min_share = 0.3;       // a continuation must hold this share of its context's count
  int64_t global_tokens = 1 << 18;  // finished outputs kept in the shared index (FIFO)
};
std::unique_ptr<Drafter> make_suffix_drafter(const SuffixOptions& options = {});

}  // namespace tessera::spec
