#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "core/log.h"
#include "engine/stop_checker.h"
#include "grammar/matcher.h"
#include "kv/prefix_hash.h"
#include "tokenizer/tokenizer.h"
#include "spec/model_drafter.h"

namespace tessera::engine {
namespace {

constexpr size_t kDefaultKvBytesCap = size_t{1} << 30;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int32_t choose_num_blocks(const Model& m, const EngineConfig& c, int64_t max_model_len) {
  if (c.num_kv_blocks > 0) return c.num_kv_blocks + 1;  // + the null block
  const size_t per_block = KvCache::bytes_per_block(m.config(), c.block_size, c.kv_type);
  size_t bytes = c.kv_memory_bytes;
  if (bytes == 0) {
    const int64_t tokens = static_cast<int64_t>(c.max_num_seqs) * max_model_len;
    const size_t want = per_block * static_cast<size_t>((tokens + c.block_size - 1) / c.block_size + 1);
    bytes = std::min(want, kDefaultKvBytesCap);
  }
  return KvCache::blocks_for_memory(m.config(), c.block_size, c.kv_type, bytes);
}

}  // namespace

Engine::Engine(const Model& model, const Tokenizer* tokenizer, const EngineConfig& config)
    : model_(model), tokenizer_(tokenizer), config_(config) {
  if (config_.max_model_len <= 0) config_.max_model_len = model.config().n_ctx_train;
  TESSERA_CHECK(config_.block_size >= 1 && config_.block_size <= 1024, kInvalidArgument,
                "block size {} must be in 1..1024", config_.block_size);
  pool_ = std::make_unique<ThreadPool>(config_.threads);
  const int32_t n_blocks = choose_num_blocks(model, config_, config_.max_model_len);
  kv_cache_ = std::make_unique<KvCache>(model.config(), KvCacheShape{n_blocks, config_.block_size, config_.kv_type, config_.kv_hadamard, model.key_mean()});
  open_kv_store();
  make_scheduler();
  if (scheduler_->config().max_model_len < config_.max_model_len) {
    // As vLLM says it: the cache cannot hold one full-context sequence, so
    // that is the longest a request may be (and the default length of one
    // that names no max_tokens).
    TESSERA_LOG_WARN("the KV cache ({} blocks of {} tokens) cannot hold one sequence of the model's context ({} "
                     "tokens): requests are limited to {} tokens; give it more --kv-memory (or --kv-blocks) for more",
                     n_blocks - 1, config_.block_size, config_.max_model_len, scheduler_->config().max_model_len);
    config_.max_model_len = scheduler_->config().max_model_len;
  }
  TESSERA_CHECK(config_.spec_k >= 1 && config_.spec_k <= 64, kInvalidArgument, "--spec-k {} must be in 1..64",
                config_.spec_k);
  switch (config_.spec_method) {
    case spec::Method::kNone: break;
    case spec::Method::kNgram: drafter_ = spec::make_ngram_drafter(config_.spec_ngram); break;
    case spec::Method::kSuffix: drafter_ = spec::make_suffix_drafter(config_.spec_suffix); break;
    case spec::Method::kDraft:
    case spec::Method::kLayers: drafter_ = make_model_drafter(); break;
  }
  if (config_.spec_drafter) drafter_ = config_.spec_drafter;
  if (drafter_) calibrate_step_cost();
  init_vocab_mask();
  seed_source_ = Rng(config_.seed != 0 ? config_.seed : std::random_device{}());
  update_stats();
}

Engine::~Engine() {
  // Write-back: what RAM still holds goes down before the store closes.
  if (kv_store_ && config_.kv_store_write_back) {
    for (BlockExport& e : scheduler_->take_unwritten()) kv_store_->put(std::move(e.ref), kv_cache_->export_block(e.block));
  }
}

void Engine::make_scheduler() {
  auto kv = std::make_unique<kv::KvManager>(kv::CacheConfig{config_.block_size, kv_cache_->shape().num_blocks});
  SchedulerConfig sc;
  sc.max_num_seqs = config_.max_num_seqs;
  sc.max_num_batched_tokens = config_.max_num_batched_tokens;
  sc.max_model_len = config_.max_model_len;
  sc.enable_prefix_caching = config_.enable_prefix_caching;
  sc.block_hash = config_.prefix_block_hash;
  sc.sliding_window = model_.config().sliding_window;  // every layer's window (0: none)
  sc.long_rope_after = model_.long_rope_after();
  sc.long_rope_by_context = config_.long_rope == LongRopeMode::kContext;
  sc.store = kv_store_.get();
  sc.store_wait_s = config_.kv_store_wait_s;
  sc.store_write_back = config_.kv_store_write_back;
  auto scheduler = std::make_unique<Scheduler>(sc, *kv);
  {
    // Other threads read the scheduler's limits under mu_ (prepare); the
    // old pair is destroyed after the swap, outside the lock.
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(scheduler_, scheduler);
    std::swap(kv_manager_, kv);
  }
  scheduler.reset();
  runner_ = std::make_unique<ModelRunner>(model_, *kv_cache_, *pool_);
}

std::shared_ptr<spec::Drafter> Engine::make_model_drafter() {
  spec::ModelDrafterOptions o;
  // As many tokens as the target's cache holds, at the same block size.
  o.capacity_tokens = static_cast<int64_t>(kv_manager_->pool().num_blocks() - 1) * config_.block_size;
  o.block_size = config_.block_size;
  o.kv_type = config_.kv_type;
  o.kv_hadamard = config_.kv_hadamard;
  o.max_batch_tokens = config_.max_num_batched_tokens;
  if (config_.spec_method == spec::Method::kDraft) {
    const Model* d = config_.spec_draft_model;
    TESSERA_CHECK(d != nullptr, kInvalidArgument, "--spec draft needs a draft model (--draft-model FILE)");
    TESSERA_CHECK(d->config().n_vocab == model_.config().n_vocab, kInvalidArgument,
                  "the draft model's vocabulary ({} tokens) differs from the target's ({})", d->config().n_vocab,
                  model_.config().n_vocab);
    measure_draft_prior(*d, {});
    return spec::make_model_drafter(*d, o, *pool_);
  }
  o.skip_layers = config_.spec_skip_layers;
  if (o.skip_layers.empty()) {
    TESSERA_CHECK(tokenizer_ != nullptr, kInvalidArgument,
                  "--spec layers without a tokenizer needs the skipped layers named (--draft-layers)");
    const std::vector<int32_t> probe = tokenizer_->encode(spec::kLayerProbeText, /*add_special=*/true);
    const spec::LayerChoice c = spec::choose_layers_to_skip(model_, *pool_, probe);
    if (c.skip.empty()) {
      TESSERA_LOG_WARN("--spec layers: no set of skipped layers is predicted to pay on this model (the best agreed "
                       "with the full model on {:.0f}% of a probe text's tokens: a predicted {:.2f}x), so none is "
                       "used; name one with --draft-layers to force it",
                       100.0 * c.acceptance, c.predicted_speedup);
      return nullptr;
    }
    std::string names;
    for (size_t l = 0; l < c.skip.size(); ++l) {
      if (!c.skip[l]) continue;
      if (!names.empty()) names += ',';
      names += std::to_string(l);
    }
    TESSERA_LOG_INFO("speculative decoding (layers): skipping layers {} (agreement with the full "
                     "model {:.2f} on a probe text, predicted speed-up {:.2f}x)", names, c.acceptance, c.predicted_speedup);
    o.skip_layers = c.skip;
    spec_prior_ = c.acceptance;
  } else {
    measure_draft_prior(model_, o.skip_layers);
  }
  return spec::make_model_drafter(model_, o, *pool_);
}

void Engine::measure_draft_prior(const Model& draft, const std::vector<uint8_t>& skip) {
  if (tokenizer_ == nullptr) return;  // no text to measure on: the prior stays a guess
  const std::vector<int32_t> probe = tokenizer_->encode(spec::kLayerProbeText, /*add_special=*/true);
  spec_prior_ = spec::measure_agreement(model_, draft, skip, *pool_, probe);
  TESSERA_LOG_INFO("speculative decoding ({}): the drafter agrees with the target on {:.0f}% of a probe text's "
                   "tokens (the acceptance first drafts are sized with)",
                   spec::method_name(config_.spec_method), 100.0 * spec_prior_);
}

namespace {
// Sample i of a request draws from its own stream of the request's seed, so
// seeded requests are reproducible and parallel samples differ.
Rng sample_rng(uint64_t seed, int32_t index) { return Rng(seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(index)); }
}  // namespace

RequestId Engine::add_request(std::string_view prompt, const SamplingParams& params, OutputCallback cb,
                              RequestAdapters adapters) {
  TESSERA_CHECK(tokenizer_ != nullptr, kInvalidArgument, "this engine has no tokenizer; send token ids");
  return add_request(tokenizer_->encode(prompt, /*add_special=*/true, /*parse_special=*/true), params, std::move(cb),
                     std::move(adapters));
}

RequestId Engine::add_request(std::vector<int32_t> prompt, const SamplingParams& params, OutputCallback cb,
                              RequestAdapters adapters) {
  return enqueue(prepare(std::move(prompt), params, std::move(adapters)), std::move(cb));
}

RequestId Engine::add_request(PromptLayout layout, const SamplingParams& params, OutputCallback cb,
                              RequestAdapters adapters) {
  return enqueue(prepare(std::move(layout), params, std::move(adapters)), std::move(cb));
}

PreparedRequest Engine::prepare(std::vector<int32_t> prompt, const SamplingParams& params, RequestAdapters adapters) {
  auto r = std::make_unique<Request>();
  r->tokens = std::move(prompt);
  r->params = params;
  const int64_t n = r->num_tokens();
  validate_request(*r, n, std::move(adapters));
  return {std::move(r)};
}

PreparedRequest Engine::prepare(PromptLayout layout, const SamplingParams& params, RequestAdapters adapters) {
  TESSERA_CHECK(layout.positions.size() == layout.tokens.size() && layout.preloaded &&
                    layout.preloaded->n_tokens < static_cast<int64_t>(layout.tokens.size()),
                kInvalidArgument, "malformed Prompt Cache layout");
  auto r = std::make_unique<Request>();
  const int64_t max_position = layout.positions.back() + 1;
  r->tokens = std::move(layout.tokens);
  r->positions = std::move(layout.positions);
  r->preloaded = std::move(layout.preloaded);
  r->cache_salt = layout.cache_salt;
  r->params = params;
  validate_request(*r, max_position, std::move(adapters));
  return {std::move(r)};
}

void Engine::validate_request(Request& req, int64_t max_position, RequestAdapters adapters) {
  Request* r = &req;
  fault(FaultStage::kPrepare, req);
  const int64_t V = model_.config().n_vocab;
  // Its own adapter, else the engine's (--lora), else none. The adapter is
  // part of the prefix-cache key: two adapters never share KV.
  r->lora = adapters.lora ? std::move(adapters.lora) : config_.lora;
  if (r->lora) {
    TESSERA_CHECK(r->lora->layers.size() == static_cast<size_t>(model_.config().n_layer), kInvalidArgument,
                  "adapter '{}' has {} layers; the model has {}", r->lora->name, r->lora->layers.size(),
                  model_.config().n_layer);
    r->cache_salt ^= kv::block_hash(r->lora->uid, 0x10a4, {}) | 1;
  }
  // A soft prompt (its own, else the engine's): its rows enter as
  // placeholder tokens ahead of the prompt.
  if (!adapters.soft_prompt) adapters.soft_prompt = config_.soft_prompt;
  if (adapters.soft_prompt) {
    const SoftPrompt& sp = *adapters.soft_prompt;
    TESSERA_CHECK(sp.n_embd == model_.config().n_embd, kInvalidArgument,
                  "soft prompt '{}' has rows of {} values; the model's embeddings have {}", sp.name, sp.n_embd,
                  model_.config().n_embd);
    TESSERA_CHECK(r->positions.empty() && !r->preloaded, kInvalidArgument,
                  "a soft prompt cannot be combined with a Prompt Cache prompt");
    r->tokens.insert(r->tokens.begin(), static_cast<size_t>(sp.n_virtual), kSoftPromptPlaceholder);
    max_position += sp.n_virtual;
    r->cache_salt ^= kv::block_hash(sp.uid, 0x50f7, {}) | 1;
    r->soft_prompt = std::move(adapters.soft_prompt);
  }
  const SamplingParams& params = r->params;
  const std::string bad = validate(params, V);
  TESSERA_CHECK(bad.empty(), kInvalidArgument, "{}", bad);
  TESSERA_CHECK(!params.constraint || tokenizer_ != nullptr, kInvalidArgument,
                "structured output needs the model's tokenizer");
  for (int32_t t : r->tokens) {
    TESSERA_CHECK(t >= 0 && t < V, kInvalidArgument, "prompt token id {} is out of range (vocabulary of {})", t, V);
  }
  if (!params.speculative_method.empty()) {
    const spec::Method m = spec::parse_method(params.speculative_method);
    const spec::Method mine = drafter_ && !config_.spec_drafter ? config_.spec_method : spec::Method::kNone;
    TESSERA_CHECK(m == spec::Method::kNone || m == mine, kInvalidArgument,
                  "speculative method '{}' is not available: this server speculates with '{}' (--spec)",
                  params.speculative_method, drafter_ ? (config_.spec_drafter ? drafter_->name() : spec::method_name(mine)) : "none");
    if (m == spec::Method::kNone) r->params.speculative = false;
  }
  TESSERA_CHECK(params.n <= config_.max_num_seqs, kInvalidArgument, "n = {} exceeds the engine's {} sequences",
                params.n, config_.max_num_seqs);
  const bool bounded = params.kv_policy.bounded();
  TESSERA_CHECK(!bounded || (r->positions.empty() && !r->preloaded), kInvalidArgument,
                "a bounded kv_policy cannot be combined with a Prompt Cache prompt");
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);  // a restart replaces the scheduler (make_scheduler)
    why = scheduler_->check_admissible(r->num_tokens(), params.max_tokens, params.kv_policy);
  }
  if (why.empty() && !bounded && max_position + params.max_tokens > config_.max_model_len) {
    why = fmt::format("the prompt reaches position {}; with {} tokens to generate it exceeds the maximum context "
                      "length of {}", max_position, params.max_tokens, config_.max_model_len);
  }
  TESSERA_CHECK(why.empty(), kOutOfRange, "{}", why);
  // H2O / SpAtten: its table keeps the attention mass of each key.
  if (params.kv_policy.scored()) r->blocks.score_depth = kv::score_depth(model_.config().n_layer);

  r->store_identity = request_store_identity(*r);
  r->num_prompt_tokens = r->num_tokens();
  for (int64_t i = r->num_virtual_tokens(); i < r->num_tokens(); ++i) ++r->history.prompt[r->tokens[static_cast<size_t>(i)]];
  if (tokenizer_ != nullptr) {
    // Output text continues the prompt's (see StreamingDecoder::skip).
    r->decoder = std::make_unique<StreamingDecoder>(*tokenizer_);
    r->decoder->skip(std::span<const int32_t>(r->tokens).subspan(static_cast<size_t>(r->num_virtual_tokens())));
  }
}

RequestId Engine::enqueue(PreparedRequest p, OutputCallback cb) {
  TESSERA_CHECK(p.req != nullptr, kInvalidArgument, "an empty or already queued request");
  std::unique_ptr<Request> r = std::move(p.req);
  r->arrival = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  r->id = r->group = next_id_++;
  r->seed = r->params.seed ? *r->params.seed : seed_source_.next();
  r->rng = sample_rng(r->seed, 0);
  const RequestId id = r->id;
  inbox_.push_back({std::move(r), std::move(cb)});
  unfinished_.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void Engine::abort(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(id);
}

bool Engine::has_unfinished() const { return unfinished_.load(std::memory_order_relaxed) > 0; }

void Engine::drain_inbox(std::vector<RequestOutput>& outputs) {
  std::vector<Pending> adds;
  std::vector<RequestId> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adds.swap(inbox_);
    aborts.swap(aborts_);
  }
  for (Pending& p : adds) {
    const RequestId id = p.req->id;
    prompt_tokens_total_ += p.req->num_prompt_tokens;
    if (p.cb) callbacks_[id] = std::move(p.cb);
    groups_[id] = {id};
    Request* r = scheduler_->add(std::move(p.req));
    guarded(r, outputs, [&] { fault(FaultStage::kAdmit, *r); });
  }
  for (auto& [group, why] : undelivered_) {
    auto g = groups_.find(group);
    if (g == groups_.end()) continue;  // ended meanwhile
    for (RequestId m : g->second) {
      if (Request* r = scheduler_->find(m); r != nullptr && !r->finished()) {
        fail_group(r, why, outputs);
        break;
      }
    }
  }
  undelivered_.clear();
  for (RequestId id : aborts) {
    std::vector<RequestId> members;
    if (auto g = groups_.find(id); g != groups_.end()) {
      members = g->second;
    } else {
      members = {id};
    }
    for (RequestId m : members) {
      Request* r = scheduler_->find(m);
      if (r == nullptr || r->finished()) continue;
      RequestOutput out = make_output(*r);
      finish(r, FinishReason::kAbort, /*flush=*/false, out);
      emit(outputs, std::move(out));
    }
  }
}

const char* fault_stage_name(FaultStage s) {
  switch (s) {
    case FaultStage::kPrepare: return "prepare";
    case FaultStage::kAdmit: return "admit";
    case FaultStage::kDraft: return "draft";
    case FaultStage::kForward: return "forward";
    case FaultStage::kSample: return "sample";
    case FaultStage::kDetokenize: return "detokenize";
    case FaultStage::kStopCheck: return "stop_check";
    case FaultStage::kOutput: return "output";
  }
  return "?";
}

RequestOutput Engine::make_output(const Request& r) const {
  RequestOutput o;
  o.id = r.id;
  o.group = r.group;
  o.index = r.index;
  o.num_prompt_tokens = r.num_prompt_tokens;
  o.num_cached_tokens = r.num_cached_tokens;
  return o;
}

void Engine::finish(Request* r, FinishReason reason, bool flush, RequestOutput& out) {
  // Text held back for a possible stop string, or still in the UTF-8
  // decoder, is real output when the request ends for another reason.
  if (flush) {
    std::string rest = r->decoder ? r->decoder->flush() : std::string();
    StopMatch m = check_stop_strings(r->held_text, rest, r->params.stop);
    out.text += m.emit;
    if (m.stopped) {
      reason = FinishReason::kStop;
    } else {
      out.text += r->held_text;
    }
    r->held_text.clear();
  }
  scheduler_->finish(r, reason);
  out.finished = true;
  out.finish_reason = reason;
  // Samples are forked at the group's first sampled token, so a group that
  // ends before then has one member; after, every member is listed.
  out.group_finished = true;
  if (auto g = groups_.find(r->group); g != groups_.end()) {
    for (RequestId m : g->second) {
      const Request* q = scheduler_->find(m);
      if (q != nullptr && !q->finished()) out.group_finished = false;
    }
  }
  out.num_output_tokens = r->num_output_tokens();
  const auto now = Clock::now();
  out.elapsed = seconds(now - r->arrival);
  if (r->first_token_time) out.time_to_first_token = seconds(*r->first_token_time - r->arrival);
  ++finished_total_;
  unfinished_.fetch_sub(1, std::memory_order_relaxed);
}

void Engine::emit(std::vector<RequestOutput>& outputs, RequestOutput out) { outputs.push_back(std::move(out)); }

void Engine::append_token(Request* r, const SampleResult& s, RequestOutput& out) {
  const int32_t tok = s.token;
  const auto now = Clock::now();
  if (!r->positions.empty()) r->positions.push_back(r->positions.back() + 1);
  r->tokens.push_back(tok);
  r->history.add_output(tok);
  // The sampler only draws tokens the mask allows.
  TESSERA_CHECK(!r->matcher || r->matcher->accept(tok), kInternal, "structured output: token {} was sampled against "
                "the grammar", tok);
  if (!r->first_token_time) r->first_token_time = now;
  r->last_token_time = now;
  ++generation_tokens_total_;
  out.new_tokens.push_back(tok);
  if (r->params.logprobs) out.logprobs.push_back(s.logprob);
  if (r->params.top_logprobs > 0) out.top_logprobs.push_back(s.top);
  out.num_output_tokens = r->num_output_tokens();
  if (r->first_token_time) out.time_to_first_token = seconds(*r->first_token_time - r->arrival);
  out.elapsed = seconds(now - r->arrival);

  const SamplingParams& p = r->params;
  const bool eos = !p.ignore_eos && tokenizer_ != nullptr && tokenizer_->is_eog(tok);
  const bool stop_token = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
  std::string delta;
  fault(FaultStage::kDetokenize, *r);
  if (r->decoder && !eos && !stop_token) delta = r->decoder->push(tok);
  fault(FaultStage::kStopCheck, *r);
  StopMatch m = check_stop_strings(r->held_text, delta, p.stop);
  out.text += m.emit;
  FinishReason reason = FinishReason::kNone;
  const bool grammar_ended = r->matcher && r->matcher->ended();
  if (m.stopped || eos || stop_token || grammar_ended) {
    reason = FinishReason::kStop;
  } else if (r->num_output_tokens() >= p.max_tokens ||
             (!p.kv_policy.bounded() && r->num_tokens() >= config_.max_model_len)) {
    reason = FinishReason::kLength;
  }
  if (reason != FinishReason::kNone) finish(r, reason, /*flush=*/!m.stopped, out);
}

void Engine::fork_samples(Request* parent, std::span<const float> logits, std::vector<RequestOutput>& outputs) {
  const Request* after = parent;
  for (int32_t i = 1; i < parent->params.n; ++i) {
    auto c = std::make_unique<Request>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      c->id = next_id_++;
    }
    c->group = parent->group;
    c->index = i;
    c->tokens = parent->tokens;
    c->positions = parent->positions;
    c->preloaded = parent->preloaded;
    c->cache_salt = parent->cache_salt;
    c->lora = parent->lora;
    c->soft_prompt = parent->soft_prompt;
    c->num_prompt_tokens = parent->num_prompt_tokens;
    c->num_computed_tokens = parent->num_computed_tokens;
    c->num_cached_tokens = parent->num_cached_tokens;
    c->params = parent->params;
    c->blocks = kv_manager_->fork(parent->blocks);  // shared, copy-on-write
    c->block_hashes = parent->block_hashes;
    c->num_registered_blocks = parent->num_registered_blocks;
    c->seed = parent->seed;
    c->rng = sample_rng(parent->seed, i);
    c->history = parent->history;
    if (parent->decoder) c->decoder = std::make_unique<StreamingDecoder>(*parent->decoder);
    if (parent->matcher) c->matcher = std::make_unique<grammar::Matcher>(*parent->matcher);  // before parent's token
    c->arrival = parent->arrival;
    Request* child = scheduler_->add_running_after(std::move(c), after);
    after = child;
    groups_[parent->group].push_back(child->id);
    if (auto it = callbacks_.find(parent->id); it != callbacks_.end()) callbacks_[child->id] = it->second;
    unfinished_.fetch_add(1, std::memory_order_relaxed);
    logits_copy_.assign(logits.begin(), logits.end());
    const SampleResult s = sampler_.sample(logits_copy_, child->params, child->history, child->rng);
    RequestOutput out = make_output(*child);
    append_token(child, s, out);
    emit(outputs, std::move(out));
  }
}

// The masker's lexer grows with every new pattern; past this, it is
// rebuilt the next time no request holds a Matcher.
constexpr size_t kMaskerMemoryBound = size_t{1} << 30;

void Engine::make_matcher(Request* r) {
  if (masker_ && masker_->live_matchers == 0 && masker_->memory_bytes() > kMaskerMemoryBound) masker_.reset();
  if (!masker_) masker_ = grammar::make_token_masker(*tokenizer_);
  r->matcher = std::make_unique<grammar::Matcher>(r->params.constraint, *masker_);
}

void Engine::constrain(Request* r, std::span<float> row) {
  if (!r->matcher) make_matcher(r);
  grammar_bits_.resize(masker_->n_words());
  r->matcher->fill_mask(grammar_bits_);
  const size_t n = std::min(row.size(), static_cast<size_t>(masker_->n_vocab()));
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = grammar_bits_[w];
    if (bits == ~uint64_t{0}) continue;  // a whole word allowed (the scratch bit lies past n)
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (!((bits >> (i & 63)) & 1)) row[i] = -INFINITY;
    }
  }
  for (size_t i = n; i < row.size(); ++i) row[i] = -INFINITY;
}

// A draft token the grammar rejects would be rejected by the verify anyway
// (its probability is masked to zero): it is not worth computing.
void Engine::trim_draft_to_grammar(Request* r) {
  if (!r->params.constraint || r->draft.empty()) return;
  if (!r->matcher) make_matcher(r);
  const size_t before = r->matcher->num_tokens();
  size_t keep = 0;
  while (keep < r->draft.size() && r->matcher->accept(r->draft[keep])) ++keep;
  r->matcher->rollback(before);
  r->draft.resize(keep);
}

void Engine::process_sample(Request* r, std::span<float> logits, int64_t num_draft,
                            std::vector<RequestOutput>& outputs) {
  const size_t V = static_cast<size_t>(model_.config().n_vocab);
  fault(FaultStage::kSample, *r);
  if (r->params.constraint) constrain(r, logits.first(V));
  if (r->params.n > 1 && r->index == 0 && r->num_output_tokens() == 0) fork_samples(r, logits.first(V), outputs);
  RequestOutput out = make_output(*r);
  if (num_draft == 0) {
    append_token(r, sampler_.sample(logits, r->params, r->history, r->rng), out);
    emit(outputs, std::move(out));
    return;
  }
  // Verification: row i follows the request's tokens and the draft's first
  // i tokens. Each row is sampled as if it were the next step's (history
  // and penalties include the tokens accepted before it), with the draft
  // token as the proposal; the first token that differs from the draft
  // (the target's own choice) ends the verify.
  const std::vector<int32_t> draft = r->draft;
  int64_t accepted = 0;
  for (int64_t i = 0; i <= num_draft; ++i) {
    const int32_t d = i < num_draft ? draft[static_cast<size_t>(i)] : -1;
    if (i > 0 && r->params.constraint) constrain(r, logits.subspan(static_cast<size_t>(i) * V, V));
    const SampleResult s = sampler_.sample(logits.subspan(static_cast<size_t>(i) * V, V), r->params, r->history,
                                           r->rng, d);
    append_token(r, s, out);
    if (r->finished() || s.token != d) break;
    ++accepted;
  }
  r->acceptance_stats.update(num_draft, accepted);
  method_acceptance_.update(num_draft, accepted, 0.98);
  spec_drafted_ += num_draft;
  spec_accepted_ += accepted;
  ++spec_verify_steps_;
  scheduler_->on_draft_verified(r, accepted);
  emit(outputs, std::move(out));
}

void Engine::propose_drafts() {
  draft_failures_.clear();
  draft_queries_.clear();
  draft_reqs_.clear();
  draft_seconds_ = 0.0;
  int64_t base_tokens = 0, base_outputs = 0;
  const std::vector<Request*> running = scheduler_->running();  // a failed request leaves it
  for (Request* r : running) {
    if (r->finished()) continue;
    r->draft.clear();
    const int64_t pending = r->num_tokens() - r->num_computed_tokens;
    base_tokens += pending;
    if (pending != 1) continue;
    ++base_outputs;
    const SamplingParams& p = r->params;
    if (!p.speculative || p.kv_policy.bounded() || (p.n > 1 && r->num_output_tokens() == 0)) continue;
    // Never past max_tokens or the context: the verify's bonus token must fit.
    int64_t k = p.speculative_k > 0 ? p.speculative_k : config_.spec_k;
    k = std::min<int64_t>(k, p.max_tokens - r->num_output_tokens() - 1);
    k = std::min<int64_t>(k, config_.max_model_len - r->num_tokens() - 1);
    if (k <= 0) continue;
    bool ok = true;
    guarded(r, draft_failures_, [&] { fault(FaultStage::kDraft, *r); });
    for (const RequestOutput& o : draft_failures_) ok = ok && o.group != r->group;
    if (!ok) continue;
    draft_queries_.push_back({r->id, r->tokens, r->num_prompt_tokens, static_cast<int32_t>(k), &r->draft});
    draft_reqs_.push_back(r);
  }
  if (draft_reqs_.empty()) return;
  // Waiting requests' prompts also take the step's budget. When they fill
  // it, a draft token would only displace a prompt token to a later step:
  // the steps to come are as many either way, and a rejected draft is work
  // added, so nothing is drafted.
  base_tokens += scheduler_->num_waiting_tokens();
  if (config_.spec_adaptive && base_tokens >= config_.max_num_batched_tokens) return;
  const bool costly = drafter_->costly();
  if (config_.spec_adaptive) {
    // When even one certain draft token would not pay (a step already
    // compute-bound), the drafter is not asked at all: no drafting cost.
    spec::DraftCandidate perfect{1.0, 1, 0};
    spec::choose_draft_lengths(step_cost_, base_tokens, base_outputs, std::span(&perfect, 1), config_.spec_min_gain);
    if (perfect.k == 0) return;
  }
  const double prior = method_acceptance_.rate(spec_prior_);
  // A model drafter first reads what it has not computed of a sequence (a
  // whole prompt, the first time): one pass of n tokens where a running
  // sequence's costs one, at the drafter's measured share of a target step.
  const double t1 = step_cost_.predict(1);
  const double draft_share = t1 > 0.0 ? std::clamp(step_cost_.draft_per_token() / t1, 0.0, 1.0) : 0.0;
  int64_t catch_up = 0;  // tokens the drafter reads this step beyond one per query
  uncomputed_.clear();
  if (costly) {
    for (const Request* r : draft_reqs_) uncomputed_.push_back(drafter_->uncomputed_tokens(r->id, r->tokens));
  }
  auto choose = [&](auto max_k) {
    draft_candidates_.clear();
    for (size_t i = 0; i < draft_reqs_.size(); ++i) {
      const Request* r = draft_reqs_[i];
      spec::DraftCandidate d{r->acceptance_stats.rate(prior), max_k(i), 0};
      if (costly) {
        const int64_t n = uncomputed_[i];
        if (n > 1) d.setup_seconds = draft_share * std::max(0.0, step_cost_.predict(n) - t1);
        d.remaining = r->params.max_tokens - r->num_output_tokens();
      }
      draft_candidates_.push_back(d);
    }
    spec::choose_draft_lengths(step_cost_, base_tokens, base_outputs, draft_candidates_, config_.spec_min_gain);
  };
  if (config_.spec_adaptive) {
    // Size first from each request's acceptance and ask only for drafts
    // that could pay: a drafter's lookups and index updates are work too
    // (a model's proposal is the whole cost: it is asked for that much).
    choose([&](size_t i) { return static_cast<int64_t>(draft_queries_[i].max_tokens); });
    size_t kept = 0;
    for (size_t i = 0; i < draft_queries_.size(); ++i) {
      if (draft_candidates_[i].k == 0) continue;
      if (costly) {
        draft_queries_[i].max_tokens = static_cast<int32_t>(draft_candidates_[i].k);
        catch_up += std::max<int64_t>(0, uncomputed_[i] - 1);
      }
      draft_queries_[kept] = draft_queries_[i];
      draft_reqs_[kept] = draft_reqs_[i];
      ++kept;
    }
    draft_queries_.resize(kept);
    draft_reqs_.resize(kept);
    if (kept == 0) return;
  }
  const auto t0 = Clock::now();
  drafter_->propose(draft_queries_);
  for (Request* r : draft_reqs_) trim_draft_to_grammar(r);
  if (costly) {
    draft_seconds_ = seconds(Clock::now() - t0);
    int64_t drafted = 0;
    for (const Request* r : draft_reqs_) drafted += static_cast<int64_t>(r->draft.size());
    // The per-token estimate is a running sequence's: a step that also read
    // prompts (more catch-up than drafting) would inflate it.
    if (catch_up <= drafted) step_cost_.observe_draft(drafted, draft_seconds_);
  }
  if (!config_.spec_adaptive || costly) return;
  choose([&](size_t i) { return static_cast<int64_t>(draft_reqs_[i]->draft.size()); });
  for (size_t i = 0; i < draft_reqs_.size(); ++i) {
    draft_reqs_[i]->draft.resize(static_cast<size_t>(draft_candidates_[i].k));
  }
}

void Engine::calibrate_step_cost() {
  // Steps of 1 .. 64 tokens on a scratch sequence of the engine's cache (its
  // blocks are freed after; nothing is registered). Three runs each, the
  // fastest kept; every real step refines these.
  const int64_t top = std::min<int64_t>({64, config_.max_num_batched_tokens, scheduler_->config().max_model_len});
  // Warm-up first: the first steps fault the weights in and grow buffers.
  for (int rep = 0; rep < 2; ++rep) {
    if (runner_->time_scratch_step(std::min<int64_t>(top, 16), *kv_manager_) <= 0.0) return;
  }
  for (int64_t n : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}) {
    if (n > top) break;
    double best = 0.0;
    for (int rep = 0; rep < 3; ++rep) {
      const double t = runner_->time_scratch_step(n, *kv_manager_);
      if (t <= 0.0) return;  // the pool cannot hold it
      if (rep == 0 || t < best) best = t;
    }
    step_cost_.set(n, best);
  }
  if (drafter_->costly()) calibrate_draft_cost();
  TESSERA_LOG_INFO("speculative decoding ({}): a step costs {:.3f} ms at 1 token, {:.3f} at 4, {:.3f} at 8, {:.3f} at "
                   "16 (measured; drafts are sized against these)",
                   drafter_->name(), 1e3 * step_cost_.predict(1), 1e3 * step_cost_.predict(4),
                   1e3 * step_cost_.predict(8), 1e3 * step_cost_.predict(16));
  if (drafter_->costly()) {
    TESSERA_LOG_INFO("speculative decoding ({}): a drafted token costs {:.3f} ms (measured)", drafter_->name(),
                     1e3 * step_cost_.draft_per_token());
  }
}

void Engine::calibrate_draft_cost() {
  // A scratch sequence drafts 4 tokens twice (the first call warms up and
  // fills its cache); the second costs what a running sequence's proposal
  // does: one catch-up token and three draft positions.
  constexpr uint64_t kScratch = ~uint64_t{0};
  constexpr int32_t kDraft = 4;
  std::vector<int32_t> tokens(8, 0), draft;
  spec::DraftQuery q{kScratch, tokens, static_cast<int64_t>(tokens.size()), kDraft, &draft};
  drafter_->propose(std::span(&q, 1));
  tokens.insert(tokens.end(), draft.begin(), draft.end());
  q.tokens = tokens;
  const auto t0 = Clock::now();
  drafter_->propose(std::span(&q, 1));
  step_cost_.observe_draft(static_cast<int64_t>(draft.size()), seconds(Clock::now() - t0));
  drafter_->release(kScratch);
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> outputs;
  drain_inbox(outputs);
  const auto t_step = Clock::now();
  if (drafter_) {
    propose_drafts();
    for (RequestOutput& o : draft_failures_) outputs.push_back(std::move(o));
  }
  const SchedulerOutput sched = scheduler_->schedule();
  // Write-back: blocks evicted by this step's allocations, still intact.
  for (const BlockExport& ev : sched.evicted) kv_store_->put(ev.ref, kv_cache_->export_block(ev.block));
  // Blocks loaded from a lower tier are written even when nothing runs:
  // the pool already lists them as cached.
  for (const BlockImport& im : sched.imports) kv_cache_->import_block(im.block, im.data->payload());
  if (sched.empty() && kv_store_ && scheduler_->num_waiting() > 0) {
    // Only requests whose blocks are loading: wait for one, not spin.
    kv_store_->wait_for_load(std::chrono::milliseconds(2));
  }
  if (!sched.empty()) {
    const auto t0 = Clock::now();
    std::span<float> logits;
    try {
      fault(FaultStage::kForward, *sched.scheduled.front().req);
      logits = runner_->execute(sched);
    } catch (const std::exception& e) {
      recover_step(sched, e.what(), outputs);
      deliver(outputs);
      return outputs;
    }
    const double forward = seconds(Clock::now() - t0);
    if (drafter_) step_cost_.observe(sched.num_tokens, forward);
    scheduler_->on_step_computed(sched);
    const size_t V = static_cast<size_t>(model_.config().n_vocab);
    size_t row = 0;
    for (const ScheduledRequest& s : sched.scheduled) {
      if (!s.sample) continue;
      const size_t rows = static_cast<size_t>(s.num_logit_rows());
      std::span<float> mine = logits.subspan(row * V, rows * V);
      row += rows;
      if (s.req->finished()) continue;  // its group failed earlier in this loop
      mask_logits(mine, rows);
      guarded(s.req, outputs, [&] { process_sample(s.req, mine, s.num_draft, outputs); });
    }
    // What the step cost outside its forward pass, per logit row.
    if (drafter_) {
      step_cost_.observe_overhead(static_cast<int64_t>(row), seconds(Clock::now() - t_step) - forward - draft_seconds_);
    }
    ++steps_total_;
  }
  export_blocks();
  deliver(outputs);
  return outputs;
}

void Engine::open_kv_store() {
  if (config_.kv_store.empty()) return;
  kvstore::KvStoreOptions o;
  o.payload_bytes = kv_cache_->export_bytes();
  kv_store_ = std::make_unique<kvstore::TieredStore>(
      [this] { return kvstore::open_tiers(config_.kv_store, config_.kv_store_max_bytes); }, o);
  // Everything the K/V of a token chain depends on besides the adapters:
  // the weights, how the model is read (architecture, attention and RoPE
  // settings) and how the cache holds it (type, block size, layout).
  const ModelConfig& c = model_.config();
  kvstore::Hasher128 h;
  h.update_string("tessera kv-store v1");
  h.update_value(config_.weights_fingerprint);
  h.update_string(c.arch);
  for (int64_t v : {c.n_vocab, c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_rot, c.yarn_orig_ctx,
                    c.sliding_window, c.swa_window, c.swa_period, c.n_ctx_train}) {
    h.update_value(v);
  }
  for (float v : {c.rope_freq_base, c.rope_freq_scale, c.yarn_beta_fast, c.yarn_beta_slow, c.rope_attn_factor,
                  c.rope_freq_base_swa, c.rope_freq_scale_swa, c.attn_scale, c.attn_softcap}) {
    h.update_value(v);
  }
  h.update_value(c.rope_neox);
  h.update_value(static_cast<int32_t>(c.rope_scaling));
  h.update_value(model_.long_rope_after());
  h.update_value(static_cast<int32_t>(config_.long_rope));
  h.update_value(static_cast<int32_t>(config_.kv_type));
  h.update_value(static_cast<int32_t>(config_.kv_hadamard));
  for (const std::vector<float>& m : model_.key_mean()) {
    for (const float v : m) h.update_value(v);  // a quantized cache stores keys less their means
  }
  h.update_value(config_.block_size);
  h.update_value(static_cast<uint64_t>(kv_cache_->export_bytes()));
  store_identity_ = h.digest();
}

kvstore::StoreKey Engine::request_store_identity(const Request& r) const {
  // Prompt Cache modules (computed apart, placed by schema) and bounded
  // policies stay in RAM: their K/V is not a function of the tokens alone.
  if (!kv_store_ || r.preloaded || !r.positions.empty() || r.params.kv_policy.bounded()) return {};
  kvstore::Hasher128 h;
  h.update_value(store_identity_);
  if (r.lora) {
    if (r.lora->content_hash.empty()) return {};
    h.update_string("lora");
    h.update_value(r.lora->content_hash);
  }
  if (r.soft_prompt) {
    if (r.soft_prompt->content_hash.empty()) return {};
    h.update_string("soft prompt");
    h.update_value(r.soft_prompt->content_hash);
  }
  return h.digest();
}

void Engine::export_blocks() {
  if (!kv_store_) return;
  for (BlockExport& e : scheduler_->take_exports()) kv_store_->put(std::move(e.ref), kv_cache_->export_block(e.block));
}

// Callbacks run once the stats describe the step: whoever a finished
// request's output wakes sees its blocks already given back. A callback
// that throws fails its group at the next step (a final output is
// replaced by an error one, once).
void Engine::deliver(std::vector<RequestOutput>& outputs) {
  update_stats();
  for (RequestOutput& o : outputs) {
    auto it = callbacks_.find(o.id);
    if (it == callbacks_.end()) continue;
    try {
      fault(FaultStage::kOutput, o);
      it->second(o);
    } catch (const std::exception& e) {
      const std::string why = fmt::format("delivering its output failed: {}", e.what());
      TESSERA_LOG_ERROR("request {}: {}", o.group, why);
      if (!o.finished) {
        undelivered_.emplace_back(o.group, why);
        continue;
      }
      RequestOutput last = o;
      last.new_tokens.clear();
      last.text.clear();
      last.logprobs.clear();
      last.top_logprobs.clear();
      last.finish_reason = FinishReason::kError;
      last.error = why;
      try {
        it->second(last);
      } catch (const std::exception& e2) {
        TESSERA_LOG_ERROR("request {}: its error could not be delivered either: {}", o.group, e2.what());
      }
    }
  }
  // Finished requests are forgotten once their last output is out.
  for (const RequestOutput& o : outputs) {
    if (!o.finished) continue;
    scheduler_->release(o.id);
    if (drafter_) drafter_->release(o.id);
    callbacks_.erase(o.id);
    auto g = groups_.find(o.group);
    if (g != groups_.end()) {
      bool all_done = true;
      for (RequestId m : g->second) {
        if (scheduler_->find(m) != nullptr) all_done = false;
      }
      if (all_done) groups_.erase(g);
    }
  }
}

template <class Fn>
void Engine::guarded(Request* r, std::vector<RequestOutput>& outputs, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    fail_group(r, e.what(), outputs);
  }
}

void Engine::fault(FaultStage stage, const Request& r) const {
  if (config_.fault_hook) config_.fault_hook({stage, r.id, r.group, r.num_output_tokens()});
}

void Engine::fault(FaultStage stage, const RequestOutput& o) const {
  if (config_.fault_hook) config_.fault_hook({stage, o.id, o.group, o.num_output_tokens});
}

void Engine::fail_group(Request* r, const std::string& why, std::vector<RequestOutput>& outputs) {
  TESSERA_LOG_ERROR("request {} failed: {}", r->group, why);
  std::vector<RequestId> members = {r->id};
  if (auto g = groups_.find(r->group); g != groups_.end()) members = g->second;
  for (RequestId m : members) {
    Request* q = scheduler_->find(m);
    if (q == nullptr || q->finished()) continue;
    RequestOutput out = make_output(*q);
    q->error = why;
    out.error = why;
    finish(q, FinishReason::kError, /*flush=*/false, out);
    ++failed_total_;
    emit(outputs, std::move(out));
  }
}

void Engine::recover_step(const SchedulerOutput& sched, const std::string& why, std::vector<RequestOutput>& outputs) {
  TESSERA_LOG_ERROR("the forward pass failed ({}): failing the {} requests of this step and restarting", why,
                    sched.scheduled.size());
  for (const ScheduledRequest& s : sched.scheduled) {
    if (!s.req->finished()) fail_group(s.req, "the forward pass failed: " + why, outputs);
  }
  // What the failed pass may have left half-written belongs to the failed
  // requests, whose blocks are free now; cached blocks are only trusted
  // again once recomputed, and the runner's scratch starts afresh.
  kv_manager_->pool().clear_hashes();
  runner_ = std::make_unique<ModelRunner>(model_, *kv_cache_, *pool_);
  ++restarts_total_;
}

std::vector<RequestOutput> Engine::fail_all(const std::string& why) {
  TESSERA_LOG_ERROR("the engine step failed ({}): failing every request and restarting", why);
  const std::string msg = "the engine failed: " + why;
  std::vector<RequestOutput> outputs;
  std::vector<Pending> adds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adds.swap(inbox_);
    aborts_.clear();
  }
  for (Pending& p : adds) {  // queued ones end the same way
    const RequestId id = p.req->id;
    if (p.cb) callbacks_[id] = std::move(p.cb);
    groups_[id] = {id};
    scheduler_->add(std::move(p.req));
  }
  // Every request still known: unfinished ones end now; finished ones
  // whose last output the failed step never delivered get an error one.
  std::vector<Request*> all = scheduler_->running();
  for (Request* r : scheduler_->waiting()) all.push_back(r);
  for (const auto& [id, cb] : callbacks_) {
    Request* r = scheduler_->find(id);
    if (r != nullptr && r->finished()) all.push_back(r);
  }
  for (Request* r : all) {
    RequestOutput out = make_output(*r);
    if (!r->finished()) {
      finish(r, FinishReason::kError, /*flush=*/false, out);
      ++failed_total_;
    }
    r->error = msg;
    out.finished = true;
    out.finish_reason = FinishReason::kError;
    out.error = msg;
    out.group_finished = false;
    emit(outputs, std::move(out));
  }
  // One output per group says it is over: its last.
  std::unordered_map<RequestId, size_t> last;
  for (size_t i = 0; i < outputs.size(); ++i) last[outputs[i].group] = i;
  for (const auto& [group, i] : last) outputs[i].group_finished = true;
  undelivered_.clear();
  deliver(outputs);
  if (drafter_) {
    for (const RequestOutput& o : outputs) drafter_->release(o.id);
  }
  // A fresh start of the shared state: pool, scheduler, runner.
  callbacks_.clear();
  groups_.clear();
  make_scheduler();
  ++restarts_total_;
  update_stats();
  return outputs;
}

// Logit rows of ids that must never be sampled are set to -inf, so every
// sampling mode (and the logprobs, as vLLM reports them) sees the
// vocabulary the tokenizer can decode.
void Engine::mask_logits(std::span<float> logits, size_t rows) const {
  if (masked_ids_.empty()) return;
  const size_t V = logits.size() / rows;
  for (size_t i = 0; i < rows; ++i) {
    float* row = logits.data() + i * V;
    for (int32_t id : masked_ids_) row[id] = -INFINITY;
  }
}

void Engine::init_vocab_mask() {
  if (tokenizer_ == nullptr) return;
  const int32_t rows = model_.config().n_vocab;
  const int32_t ids = tokenizer_->n_vocab();
  int32_t unused = 0;
  for (int32_t id = 0; id < std::min(rows, ids); ++id) {
    if (tokenizer_->is_unused(id)) {
      masked_ids_.push_back(id);
      ++unused;
    }
  }
  for (int32_t id = ids; id < rows; ++id) masked_ids_.push_back(id);
  if (ids > rows) {
    TESSERA_LOG_WARN("vocabulary: the tokenizer has {} ids but the model only {} embedding rows: prompts holding ids "
                     ">= {} are refused", ids, rows, rows);
  }
  if (!masked_ids_.empty()) {
    TESSERA_LOG_INFO("vocabulary: {} embedding rows, {} tokenizer ids: {} ids are never sampled ({} past the "
                     "tokenizer, {} it declares unused)",
                     rows, ids, masked_ids_.size(), std::max(0, rows - ids), unused);
  }
  TESSERA_CHECK(static_cast<int32_t>(masked_ids_.size()) < rows, kInvalidArgument,
                "every token id of the model is masked: the tokenizer does not match the model");
}

void Engine::update_stats() {
  EngineStats s;
  s.num_running = static_cast<int64_t>(scheduler_->num_running());
  s.num_waiting = static_cast<int64_t>(scheduler_->num_waiting());
  const kv::BlockPoolStats ps = kv_manager_->pool().stats();
  s.kv_blocks_used = ps.used;
  s.kv_blocks_total = ps.total;
  s.kv_utilization = kv_manager_->usage().utilization();
  s.prefix_cached_blocks = ps.cached;
  s.prefix_evictions_total = ps.evictions;
  s.prompt_tokens_total = prompt_tokens_total_;
  s.generation_tokens_total = generation_tokens_total_;
  s.prefix_query_tokens_total = scheduler_->stats().prefix_query_tokens;
  s.prefix_hit_tokens_total = scheduler_->stats().prefix_hit_tokens;
  s.preemptions_total = scheduler_->stats().preemptions;
  s.long_rope_restarts_total = scheduler_->stats().long_rope_restarts;
  s.steps_total = steps_total_;
  s.requests_finished_total = finished_total_;
  s.spec_drafted_tokens_total = spec_drafted_;
  s.spec_accepted_tokens_total = spec_accepted_;
  s.spec_verify_steps_total = spec_verify_steps_;
  s.requests_failed_total = failed_total_;
  s.engine_restarts_total = restarts_total_;
  s.n_expert = model_.config().n_expert;
  s.expert_tokens_total = runner_->state().expert_tokens;
  s.store_hit_tokens_total = scheduler_->stats().store_hit_tokens;
  if (kv_store_) s.kv_store = kv_store_->stats();
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = s;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.num_waiting += static_cast<int64_t>(inbox_.size());
  return s;
}

}  // namespace tessera::engine
