// The engine: requests in, tokens out, one iteration at a time.
//
//   step():  schedule -> execute (one forward pass) -> sample -> update
//
// add_request() and abort() may be called from any thread (a server's
// handlers); step() runs on one thread (the engine loop). Outputs are
// returned by step() and, when a callback was given, also handed to it on
// the engine thread at the end of the step, after stats() describes it (a
// finished request's blocks are free by the time its last output arrives).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model_runner.h"
#include "engine/prompt_cache.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "kv/kv_manager.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "spec/drafter.h"
#include "spec/policy.h"

namespace tessera {
class Tokenizer;
namespace grammar {
class TokenMasker;
}
}

namespace tessera::engine {

// Fault isolation. A step's work per request (admission, drafting,
// sampling, detokenization, the stop check, delivering its output) runs
// guarded: an exception there fails that request's group alone, with
// FinishReason::kError and the message in RequestOutput::error, and frees
// its blocks; the others step on. The forward pass is shared: an exception
// there fails the requests of that step and restarts the engine's shared
// state (engine.cc, recover_step). A fault hook lets tests throw at each
// stage; it is empty in production.
// kPrepare is not guarded: it runs on the caller's thread (Engine::prepare),
// where an exception is the caller's; tests use it to hold a preparation.
enum class FaultStage { kPrepare, kAdmit, kDraft, kForward, kSample, kDetokenize, kStopCheck, kOutput };
const char* fault_stage_name(FaultStage s);
struct FaultSite {
  FaultStage stage = FaultStage::kAdmit;
  RequestId id = 0;      // the request (kForward: the step's first)
  RequestId group = 0;
  int64_t num_output_tokens = 0;
};
using FaultHook = std::function<void(const FaultSite&)>;

struct EngineConfig {
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 512;
  int64_t max_model_len = 0;      // 0: the model's training context
  int32_t block_size = 16;
  int32_t num_kv_blocks = 0;      // 0: from kv_memory_bytes
  size_t kv_memory_bytes = 0;     // 0: enough for max_num_seqs full contexts, at most 1 GiB
  DType kv_type = DType::kF16;
  bool kv_hadamard = false;  // Hadamard-rotated q8_0 / q4_0 K and V (kernels/attention.h)
  bool enable_prefix_caching = true;
  kv::BlockHashFn prefix_block_hash;  // empty: XXH3 keyed per process (kv/prefix_hash.h); tests inject collisions
  int threads = 0;                // 0: all cores
  uint64_t seed = 0;              // for requests without a seed; 0: random
  LongRopeMode long_rope = LongRopeMode::kSequence;  // Phi-3's LongRoPE regimes (model/model.h)

  // Speculative decoding (spec/): a drafter proposes up to spec_k tokens per
  // decoding sequence and the step verifies them. Adaptive: each draft's
  // length (0: none) maximises the step's expected tokens per second from
  // measured step costs and acceptance (spec/policy.h); off: every proposal
  // is verified at its full length (tests, and the benchmark's fixed k).
  spec::Method spec_method = spec::Method::kNone;
  int32_t spec_k = 8;
  spec::NgramOptions spec_ngram;
  spec::SuffixOptions spec_suffix;
  bool spec_adaptive = true;
  double spec_min_gain = 1.03;  // a draft must raise expected tokens/s by this factor
  std::shared_ptr<spec::Drafter> spec_drafter;  // a drafter of one's own (tests); overrides spec_method
  // A LoRA adapter every request runs with (--lora; adapters/lora_gguf.h).
  std::shared_ptr<const LoraAdapter> lora;
  // A soft prompt every request runs with (--soft-prompt FILE).
  std::shared_ptr<const SoftPrompt> soft_prompt;
  // `draft`: the draft model (same vocabulary; must outlive the engine).
  const Model* spec_draft_model = nullptr;
  // `layers`: the target's layers the draft skips ([n_layer] 0/1); empty:
  // chosen at start from measured acceptance (spec/model_drafter.h).
  std::vector<uint8_t> spec_skip_layers;
  // Tests: called at each guarded stage; throwing injects a fault there.
  FaultHook fault_hook;
  // The global prompt cache (kvstore/): lower tiers below the RAM prefix
  // cache, each a directory or redis://HOST:PORT (--kv-store), a bound on
  // each directory's bytes (0: none), how long a request may wait for its
  // blocks before computing them, and the fingerprint of the weights
  // (model/fingerprint.h) its block keys start from. The engine mixes in
  // the architecture, RoPE settings, KV type and block size.
  std::vector<std::string> kv_store;
  int64_t kv_store_max_bytes = 0;
  double kv_store_wait_s = 2.0;
  bool kv_store_write_back = false;  // write blocks when RAM evicts them (and at exit), not when full
  kvstore::StoreKey weights_fingerprint;
};

using OutputCallback = std::function<void(const RequestOutput&)>;


struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  double kv_utilization = 1.0;     // live token slots / allocated token slots
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t prefix_query_tokens_total = 0;
  int64_t prefix_hit_tokens_total = 0;
  int64_t prefix_cached_blocks = 0;
  int64_t prefix_evictions_total = 0;
  int64_t preemptions_total = 0;
  int64_t long_rope_restarts_total = 0;  // requests computed again in LongRoPE's long regime
  int64_t steps_total = 0;
  int64_t requests_finished_total = 0;
  int64_t spec_drafted_tokens_total = 0;   // draft tokens verified
  int64_t spec_accepted_tokens_total = 0;  // of which accepted
  int64_t spec_verify_steps_total = 0;     // sequence-steps that verified a draft
  int64_t requests_failed_total = 0;       // ended by a fault in their own work
  int64_t engine_restarts_total = 0;       // shared-state faults recovered from
  // A mixture of experts' load: tokens routed to each expert of each layer,
  // [n_layer * n_expert] (empty for a dense model; since the last restart).
  int64_t n_expert = 0;
  std::vector<int64_t> expert_tokens_total;
  // The global prompt cache: prompt tokens loaded from lower tiers, and
  // the tiers' own counters (empty without --kv-store).
  int64_t store_hit_tokens_total = 0;
  std::optional<kvstore::KvStoreStats> kv_store;
};

// A validated request, ready to be queued: Engine::prepare does the work
// that grows with the prompt (validation, the decoder's state, the penalty
// counts) so a caller can do it outside its own locks; enqueue is O(1).
struct PreparedRequest {
  std::unique_ptr<Request> req;
};

class Engine {
 public:
  // `tokenizer` may be null (then outputs carry no text and text prompts
  // are rejected). Model and tokenizer must outlive the engine.
  Engine(const Model& model, const Tokenizer* tokenizer, const EngineConfig& config);
  ~Engine();

  // Validates and queues a request; returns its id (for n > 1, the id of the
  // first sample; the others are reported with the same group id). Throws
  // Error(kInvalidArgument / kOutOfRange) with a message fit for a client.
  RequestId add_request(std::vector<int32_t> prompt, const SamplingParams& params, OutputCallback cb = {},
                        RequestAdapters adapters = {});
  RequestId add_request(std::string_view prompt, const SamplingParams& params, OutputCallback cb = {},
                        RequestAdapters adapters = {});
  // A Prompt Cache prompt (see engine/prompt_cache.h): imported modules'
  // K/V are written, not computed.
  RequestId add_request(PromptLayout layout, const SamplingParams& params, OutputCallback cb = {},
                        RequestAdapters adapters = {});
  // add_request in two halves (any thread): prepare validates and builds
  // (throws as add_request does), enqueue queues and returns the id.
  PreparedRequest prepare(std::vector<int32_t> prompt, const SamplingParams& params, RequestAdapters adapters = {});
  PreparedRequest prepare(PromptLayout layout, const SamplingParams& params, RequestAdapters adapters = {});
  RequestId enqueue(PreparedRequest p, OutputCallback cb = {});

  // The last resort when step() itself threw: every request (running,
  // waiting, queued) ends with kError and `why`, through its callback, and
  // the engine's shared state starts afresh (empty prefix cache, new
  // runner). Engine thread only.
  std::vector<RequestOutput> fail_all(const std::string& why);

  // Ids never sampled: past the tokenizer's vocabulary (embedding rows
  // that are padding) or declared unused by it. Sorted.
  const std::vector<int32_t>& masked_ids() const { return masked_ids_; }

  // Aborts a request (or every sample of a group); its blocks are freed at
  // the start of the next step. Unknown ids are ignored.
  void abort(RequestId id);

  std::vector<RequestOutput> step();
  bool has_unfinished() const;

  EngineStats stats() const;
  const EngineConfig& config() const { return config_; }
  const Model& model() const { return model_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }

  // Speculative decoding's measured step costs (empty without a drafter).
  const spec::StepCost& step_cost() const { return step_cost_; }

  // For tests: the KV manager's pool (call only from the engine thread).
  const kv::KvManager& kv_manager() const { return *kv_manager_; }

 private:
  struct Pending {
    std::unique_ptr<Request> req;
    OutputCallback cb;
  };
  // Validates and queues a built request; returns its id.
  void validate_request(Request& r, int64_t max_position, RequestAdapters adapters);
  // The step's per-request work, guarded (see FaultStage).
  template <class Fn>
  void guarded(Request* r, std::vector<RequestOutput>& outputs, Fn&& fn);
  void fault(FaultStage stage, const Request& r) const;
  void fault(FaultStage stage, const RequestOutput& o) const;
  // Ends every unfinished member of r's group with kError.
  void fail_group(Request* r, const std::string& why, std::vector<RequestOutput>& outputs);
  // The forward pass threw: fail the step's requests, restart shared state.
  void recover_step(const SchedulerOutput& sched, const std::string& why, std::vector<RequestOutput>& outputs);
  void deliver(std::vector<RequestOutput>& outputs);
  void mask_logits(std::span<float> logits, size_t rows) const;
  void init_vocab_mask();
  // The block pool, scheduler and runner, new (at start and on restart).
  void make_scheduler();
  void drain_inbox(std::vector<RequestOutput>& outputs);
  // Samples the rows of one scheduled request: its next token, or a draft's
  // verification (num_draft + 1 rows).
  void process_sample(Request* r, std::span<float> logits, int64_t num_draft, std::vector<RequestOutput>& outputs);
  // Asks the drafter for proposals for every decoding request and sizes them.
  void propose_drafts();
  // Step cost at a few sizes, measured on the engine's own cache.
  void calibrate_step_cost();
  // A costly drafter's time per proposed token, measured on a scratch sequence.
  void calibrate_draft_cost();
  // The `draft` / `layers` drafter the config asks for.
  std::shared_ptr<spec::Drafter> make_model_drafter();
  // A model drafter's agreement with the target on a probe text: the
  // acceptance a request's first drafts are sized with (spec_prior_).
  void measure_draft_prior(const Model& draft, const std::vector<uint8_t>& skip);
  void fork_samples(Request* parent, std::span<const float> logits, std::vector<RequestOutput>& outputs);
  // Structured output: masks the tokens r's grammar does not allow in one
  // row of logits; drops the draft tokens it does not allow.
  void constrain(Request* r, std::span<float> row);
  void make_matcher(Request* r);
  void trim_draft_to_grammar(Request* r);
  void append_token(Request* r, const SampleResult& s, RequestOutput& out);
  RequestOutput make_output(const Request& r) const;
  // flush: emit text still held back (not after a matched stop string or an abort).
  void finish(Request* r, FinishReason reason, bool flush, RequestOutput& out);
  void emit(std::vector<RequestOutput>& outputs, RequestOutput out);
  void update_stats();
  // The global prompt cache: opens the tiers; copies the blocks the
  // scheduler registered out to them; the identity a request's blocks are
  // stored under (empty: not stored).
  void open_kv_store();
  void export_blocks();
  kvstore::StoreKey request_store_identity(const Request& r) const;

  const Model& model_;
  const Tokenizer* tokenizer_;
  EngineConfig config_;
  // Made with the first constrained request. Before the scheduler: the
  // requests' Matchers point into it, so it is destroyed after them.
  std::unique_ptr<grammar::TokenMasker> masker_;
  std::vector<uint64_t> grammar_bits_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<kv::KvManager> kv_manager_;
  std::unique_ptr<KvCache> kv_cache_;
  // Before the scheduler: requests hold its tickets.
  std::unique_ptr<kvstore::TieredStore> kv_store_;
  kvstore::StoreKey store_identity_;  // the model's, before adapters
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  Sampler sampler_;
  Rng seed_source_;
  std::vector<float> logits_copy_;
  std::shared_ptr<spec::Drafter> drafter_;
  spec::StepCost step_cost_;
  spec::Acceptance method_acceptance_;  // over every request: the prior of a new one
  double spec_prior_ = 0.5;             // ... before any: measured for model drafters
  std::vector<spec::DraftQuery> draft_queries_;
  std::vector<spec::DraftCandidate> draft_candidates_;
  std::vector<Request*> draft_reqs_;  // the requests of draft_queries_
  std::vector<RequestOutput> draft_failures_;  // requests whose drafting failed this step
  std::vector<int64_t> uncomputed_;   // a costly drafter's catch-up per draft_reqs_ entry
  double draft_seconds_ = 0.0;        // this step's time in a costly drafter
  int64_t spec_drafted_ = 0, spec_accepted_ = 0, spec_verify_steps_ = 0;
  int64_t failed_total_ = 0, restarts_total_ = 0;
  std::vector<int32_t> masked_ids_;  // see masked_ids()
  // Groups whose output could not be delivered: failed at the next step.
  std::vector<std::pair<RequestId, std::string>> undelivered_;

  std::unordered_map<RequestId, OutputCallback> callbacks_;      // engine thread only
  std::unordered_map<RequestId, std::vector<RequestId>> groups_; // group -> members

  mutable std::mutex mu_;  // guards the inbox, next_id_, stats_, and swapping scheduler_ / kv_manager_
  std::vector<Pending> inbox_;
  std::vector<RequestId> aborts_;
  RequestId next_id_ = 1;
  EngineStats stats_;
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  int64_t steps_total_ = 0;
  int64_t finished_total_ = 0;
  std::atomic<int64_t> unfinished_{0};
};

}  // namespace tessera::engine
