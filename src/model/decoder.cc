#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "kernels/attention.h"
#include "kernels/quant.h"
#include "adapters/lora.h"
#include "core/mmap_file.h"
#include "core/cpu.h"
#include "model/weights.h"

namespace tessera {
namespace {

std::string blk(int64_t il, const char* name) { return fmt::format("blk.{}.{}", il, name); }

// A prepared matrix whose kernels read their own copy (packed tiles, W8A8
// codes): the mapped source rows are not read again, so their pages can go
// (a process would otherwise hold the file's pages and the copy).
kernels::PreparedWeight released(kernels::PreparedWeight p) {
  if ((!p.packed.empty() || p.w8) && p.view.row_bytes > 0) {
    release_pages(p.view.data, p.view.row_bytes * static_cast<size_t>(p.view.rows));
  }
  return p;
}

// A column part read into a copy (a file opened on demand, model/weights.h)
// that the packed weight has replaced: the copy goes (the view keeps its
// shape, for the byte counts, and points nowhere).
kernels::PreparedWeight without_copy(const gguf::File& f, kernels::PreparedWeight p) {
  if (f.on_demand() && p.view.data != nullptr && kernels::reads_packed_only(p, active_isa())) {
    f.drop(p.view.data);
    p.view.data = nullptr;
  }
  return p;
}

// Divisors of the RoPE angles, one per rotary pair: positive and finite.
std::vector<float> rope_divisors(ModelLoader& ld, const std::string& name, int64_t n) {
  std::vector<float> v = ld.vector(name, n);
  for (float x : v) {
    if (!(x > 0.0f && std::isfinite(x))) {
      fail(ErrorCode::kCorruptFile, "{}: tensor '{}' holds {}, not a positive factor", ld.file().path(), name, x);
    }
  }
  return v;
}

void add_bias(float* x, int64_t stride, int64_t n_tokens, const float* b, int64_t n) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* row = x + t * stride;
    for (int64_t i = 0; i < n; ++i) row[i] += b[i];
  }
}

void add_bias(float* x, int64_t stride, int64_t n_tokens, const std::vector<float>& b) {
  add_bias(x, stride, n_tokens, b.data(), static_cast<int64_t>(b.size()));
}

}  // namespace

void ffn_activate(FfnAct act, float* gate, const float* up, int64_t n, Isa isa) {
  switch (act) {
    case FfnAct::kGeluTanh: return kernels::gelu_tanh_mul(gate, up, n, isa);
    case FfnAct::kSwigluOai: return kernels::swiglu_oai_mul(gate, up, n, isa);
    case FfnAct::kSilu: break;
  }
  kernels::silu_mul(gate, up, n, isa);
}

float gemma_query_scale(const ModelConfig& c, int64_t n_head, int64_t n_layer_27b) {
  const int64_t d = c.n_layer == n_layer_27b ? c.n_embd / n_head : c.head_dim;
  return 1.0f / std::sqrt(static_cast<float>(d));
}

namespace {

// kKeyMeanKey's values, a layer's kv_dim at a time (empty without the key).
std::vector<std::vector<float>> read_key_mean(ModelLoader& ld, const ModelConfig& c) {
  if (!ld.file().has(kKeyMeanKey)) return {};
  ld.use_key(kKeyMeanKey);
  const char* obstacle = key_shift_obstacle(c);
  TESSERA_CHECK(obstacle == nullptr, kInvalidArgument,
                "{}: '{}' shifts the keys, which attention with {} does not allow (its scores are not shift-invariant)",
                ld.file().path(), kKeyMeanKey, obstacle == nullptr ? "" : obstacle);
  const std::vector<float> all = gguf::array_as_floats(ld.file().get_array(kKeyMeanKey), kKeyMeanKey);
  TESSERA_CHECK(static_cast<int64_t>(all.size()) == c.n_layer * c.kv_dim(), kCorruptFile,
                "{}: '{}' has {} values; {} layers x kv dim {} need {}", ld.file().path(), kKeyMeanKey, all.size(),
                c.n_layer, c.kv_dim(), c.n_layer * c.kv_dim());
  std::vector<std::vector<float>> shift;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    shift.emplace_back(all.begin() + l * c.kv_dim(), all.begin() + (l + 1) * c.kv_dim());
    for (const float v : shift.back()) {
      TESSERA_CHECK(std::isfinite(v), kCorruptFile, "{}: '{}' holds {}", ld.file().path(), kKeyMeanKey, v);
    }
  }
  return shift;
}

}  // namespace

DecoderModel::DecoderModel(ModelLoader& ld, const ConfigOptions& options, bool neox) {
  cfg_ = ld.read_config(options);
  cfg_.rope_neox = neox;
  const char* per_token = std::getenv("TESSERA_MOE_PER_TOKEN");
  moe_per_token_ = per_token != nullptr && std::string_view(per_token) == "1";
  for (const char* key : {kFfnSparsityKey, kFfnThresholdKey, kFfnRecallKey}) {
    if (ld.file().has(key)) ld.use_key(key);
  }
  ffn_thresholds_ = read_ffn_thresholds(ld.file(), cfg_.n_layer);
  if (ld.file().has(kFfnRotationKey)) {
    // QuaRot's online rotation of ffn_down's input (quant/rotate.h).
    ld.use_key(kFfnRotationKey);
    TESSERA_CHECK(!cfg_.moe() && ffn_thresholds_.empty(), kInvalidArgument,
                  "{}: '{}' rotates a dense FFN's product; this model has {}", ld.file().path(), kFfnRotationKey,
                  cfg_.moe() ? "experts" : "contextual sparsity");
    ffn_rotation_ = std::make_shared<const kernels::Rotation>(
        kernels::make_rotation(cfg_.n_ff, ld.file().get_uint(kFfnRotationKey)));
  }
  key_mean_ = read_key_mean(ld, cfg_);
  if (ld.file().has(kPostNormRotationKey)) {
    // QuaRot on Gemma (quant/rotate.h): each post-norm's output is rotated
    // into the stream's basis.
    ld.use_key(kPostNormRotationKey);
    TESSERA_CHECK(cfg_.arch == "gemma2" || cfg_.arch == "gemma3", kInvalidArgument,
                  "{}: '{}' rotates post-norms' outputs; '{}' has no post-norms", ld.file().path(), kPostNormRotationKey,
                  cfg_.arch);
    post_rotation_ = std::make_shared<const kernels::Rotation>(
        kernels::make_rotation(cfg_.n_embd, ld.file().get_uint(kPostNormRotationKey)));
  }
  const char* w8a8 = std::getenv("TESSERA_W8A8");
  const char* w4a8 = std::getenv("TESSERA_W4A8");
  const bool w8 = w8a8 != nullptr && std::string_view(w8a8) == "1", w4 = w4a8 != nullptr && std::string_view(w4a8) == "1";
  if (w8 && w4) fail(ErrorCode::kInvalidArgument, "--w8a8 and --w4a8 cannot be combined");
  int_bits_ = w8 ? 8 : w4 ? 4 : 0;
  if (int_bits_ != 0 && !ffn_thresholds_.empty()) {
    fail(ErrorCode::kInvalidArgument, "{}: W8A8 and contextual sparsity cannot be combined (run it dense: "
         "TESSERA_FFN_SPARSITY=0)", ld.file().path());
  }
  split_ = ld.split();
  if (split_.split()) {
    const gguf::TensorInfo* experts = ld.file().find_tensor("blk.0.ffn_gate_exps.weight");
    experts_by_rank_ = experts != nullptr && experts->type == DType::kQMoE;
    split_config(ld.file().path());
  }
}

void DecoderModel::split_config(const std::string& path) {
  const int n = split_.size;
  TESSERA_CHECK(split_.group != nullptr && split_.rank >= 0 && split_.rank < n, kInternal,
                "shard {} of {} without a group", split_.rank, n);
  if (experts_by_rank_) {
    TESSERA_CHECK(cfg_.n_expert >= n, kInvalidArgument, "{}: {} experts cannot be shared by {} ranks", path,
                  cfg_.n_expert, n);
  }
  const int64_t expert_neurons = experts_by_rank_ ? 0 : cfg_.n_ff_exp;
  TESSERA_CHECK(cfg_.n_head_kv % n == 0 && cfg_.n_ff % n == 0 && expert_neurons % n == 0 && cfg_.n_ff_shexp % n == 0,
                kInvalidArgument, "{}: {} KV heads and {} FFN neurons ({} per expert, {} shared) cannot be split evenly "
                "over {} ranks", path, cfg_.n_head_kv, cfg_.n_ff, cfg_.n_ff_exp, cfg_.n_ff_shexp, n);
  cfg_.n_head /= n;
  cfg_.n_head_kv /= n;
  cfg_.n_ff /= n;
  if (!experts_by_rank_) cfg_.n_ff_exp /= n;  // each expert's neurons, as a dense FFN's
  cfg_.n_ff_shexp /= n;
  for (std::vector<float>& m : key_mean_) m = own_part(m, cfg_.kv_dim());
}

ModelConfig DecoderModel::whole_config() const {
  ModelConfig c = cfg_;
  const int64_t n = split_.size;
  c.n_head *= n;
  c.n_head_kv *= n;
  c.n_ff *= n;
  if (!experts_by_rank_) c.n_ff_exp *= n;
  c.n_ff_shexp *= n;
  return c;
}

std::vector<float> DecoderModel::own_part(const std::vector<float>& whole, int64_t n) const {
  if (whole.empty() || !split_.split()) return whole;
  const auto first = whole.begin() + split_.rank * n;
  return {first, first + n};
}

void DecoderModel::load_common(ModelLoader& ld, bool rope_freqs, bool tied) {
  const gguf::File& f = ld.file();
  cfg_.n_vocab = f.tensor("token_embd.weight").ne[1];
  const std::string vocab_key = cfg_.arch + ".vocab_size";
  if (f.has(vocab_key)) {
    ld.use_key(vocab_key);
    if (f.get_uint(vocab_key) != static_cast<uint64_t>(cfg_.n_vocab)) {
      fail(ErrorCode::kCorruptFile, "{}: '{}' = {} but token_embd.weight has {} rows", f.path(), vocab_key,
           f.get_uint(vocab_key), cfg_.n_vocab);
    }
  }
  const int64_t E = cfg_.n_embd;
  tok_embd_ = ld.matrix("token_embd.weight", E, cfg_.n_vocab);
  out_norm_ = ld.vector("output_norm.weight", E);
  cfg_.tied_output = tied || !ld.has_tensor("output.weight");
  // Tensor parallelism: this rank's rows of the vocabulary, ceil(V / N) each
  // (the last rank's fewer), its logits gathered to rank 0.
  vocab_part_ = (cfg_.n_vocab + split_.size - 1) / split_.size;
  const int64_t first = std::min<int64_t>(cfg_.n_vocab, split_.rank * vocab_part_);
  const int64_t mine = std::min(cfg_.n_vocab - first, vocab_part_);
  const kernels::WeightView output = cfg_.tied_output ? matrix_rows(tok_embd_, first, mine)
                                                      : ld.matrix_rows("output.weight", E, cfg_.n_vocab, first, mine);
  output_ = released(kernels::prepare_weight(output));
  if (rope_freqs && ld.has_tensor("rope_freqs.weight")) {
    // Llama 3.1+: per-pair divisors of the RoPE angles, as llama.cpp's
    // converter computes them from the HF config's rope_scaling (llama3).
    rope_factors_ = rope_divisors(ld, "rope_freqs.weight", cfg_.n_rot / 2);
  }
  rope_.n_rot = cfg_.n_rot;
  rope_.freq_base = cfg_.rope_freq_base;
  rope_.freq_scale = cfg_.rope_freq_scale;
  rope_.neox = cfg_.rope_neox;
  rope_.freq_factors = rope_factors_.empty() ? nullptr : rope_factors_.data();
  if (cfg_.rope_scaling == RopeScaling::kYarn) {
    float dims[2];
    kernels::yarn_corr_dims(cfg_.n_rot, cfg_.yarn_orig_ctx, cfg_.rope_freq_base, cfg_.yarn_beta_fast,
                            cfg_.yarn_beta_slow, dims);
    rope_.ext_factor = 1.0f;
    rope_.yarn_low = dims[0];
    rope_.yarn_high = dims[1];
  }
  rope_.attn_factor = cfg_.rope_attn_factor;
  rope_swa_ = rope_;
  rope_swa_.freq_base = cfg_.rope_freq_base_swa;
  rope_swa_.freq_scale = cfg_.rope_freq_scale_swa;
  if (cfg_.moe()) decide_expert_layout(f);
  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    DecoderLayer& L = layers_[il];
    L.window = static_cast<int32_t>(cfg_.local_layer(il) ? cfg_.swa_window : cfg_.sliding_window);
    L.local_rope = cfg_.local_layer(il);
  }
}

void DecoderModel::load_long_rope(ModelLoader& ld) {
  if (!ld.has_tensor("rope_factors_long.weight") && !ld.has_tensor("rope_factors_short.weight")) return;
  const int64_t half = cfg_.n_rot / 2;
  rope_factors_ = rope_divisors(ld, "rope_factors_short.weight", half);
  rope_long_factors_ = rope_divisors(ld, "rope_factors_long.weight", half);
  rope_.freq_factors = rope_factors_.data();
  rope_long_ = rope_;
  rope_long_.freq_factors = rope_long_factors_.data();
  long_rope_after_ = cfg_.yarn_orig_ctx;
}

const kernels::RopeParams& DecoderModel::rope_for(bool long_regime) const {
  return long_regime && !rope_long_factors_.empty() ? rope_long_ : rope_;
}

kernels::PreparedWeight DecoderModel::prepare_linear(const kernels::WeightView& w) const {
  if (int_bits_ == 8) return released(kernels::prepare_weight_w8a8(w));
  return released(int_bits_ == 4 ? kernels::prepare_weight_w4a8(w) : kernels::prepare_weight(w));
}

kernels::PreparedWeight DecoderModel::load_linear(ModelLoader& ld, const std::string& name, int64_t cols,
                                                  int64_t rows, Share share) const {
  const gguf::TensorInfo* t = ld.file().find_tensor(name);
  if (t != nullptr && t->type == DType::kI8) {  // a W8A8 file
    if (!ffn_thresholds_.empty()) {
      fail(ErrorCode::kInvalidArgument, "{}: W8A8 and contextual sparsity cannot be combined", ld.file().path());
    }
    const int64_t n = split_.size, r = split_.rank;
    switch (share) {
      case Share::kRows: return ld.w8a8_matrix(name, cols, rows * n, {.r0 = r * rows, .rows = rows});
      case Share::kCols: return ld.w8a8_matrix(name, cols * n, rows, {.c0 = r * cols, .cols = cols});
      case Share::kWhole: break;
    }
    return ld.w8a8_matrix(name, cols, rows);
  }
  const int64_t n = split_.size, r = split_.rank;
  switch (share) {
    case Share::kRows: return prepare_linear(ld.matrix_rows(name, cols, rows * n, r * rows, rows));
    case Share::kCols:
      if (int_bits_ != 0 && split_.split()) {
        // Each row's int8 / int4 scale is its whole row's (one process's
        // codes): the whole matrix is read, its pages released after.
        const kernels::WeightView whole = ld.matrix(name, cols * n, rows);
        kernels::PreparedWeight p = kernels::prepare_weight_int_cols(whole, int_bits_, r * cols, cols);
        release_pages(whole.data, matrix_bytes(whole));
        if (p.w8) return p;
      }
    {
      kernels::PreparedWeight p = prepare_linear(ld.matrix_cols(name, cols * n, rows, r * cols, cols));
      // (Contextual sparsity transposes down's view: the copy stays.)
      if (!ffn_thresholds_.empty()) return p;
      return without_copy(ld.file(), std::move(p));
    }
    case Share::kWhole: break;
  }
  return prepare_linear(ld.matrix(name, cols, rows));
}

void DecoderModel::load_attention(ModelLoader& ld, int64_t il, bool bias, DecoderLayer& L) const {
  const int64_t E = cfg_.n_embd, Q = cfg_.q_dim(), KV = cfg_.kv_dim();
  L.attn_norm = ld.vector(blk(il, "attn_norm.weight"), E);
  AttentionWeights& w = L.attn;
  const int64_t n = split_.size;
  w.wq = load_linear(ld, blk(il, "attn_q.weight"), E, Q, Share::kRows);
  w.wk = load_linear(ld, blk(il, "attn_k.weight"), E, KV, Share::kRows);
  w.wv = load_linear(ld, blk(il, "attn_v.weight"), E, KV, Share::kRows);
  w.wo = load_linear(ld, blk(il, "attn_output.weight"), Q, E, Share::kCols);
  if (bias) {
    w.bq = own_part(ld.vector(blk(il, "attn_q.bias"), Q * n), Q);
    w.bk = own_part(ld.vector(blk(il, "attn_k.bias"), KV * n), KV);
    w.bv = own_part(ld.vector(blk(il, "attn_v.bias"), KV * n), KV);
  }
}

void DecoderModel::load_attention_fused(ModelLoader& ld, int64_t il, DecoderLayer& L) const {
  const int64_t E = cfg_.n_embd, Q = cfg_.q_dim(), KV = cfg_.kv_dim();
  L.attn_norm = ld.vector(blk(il, "attn_norm.weight"), E);
  const int64_t n = split_.size, r = split_.rank;  // this rank's heads of each part
  const std::string qkv = blk(il, "attn_qkv.weight");
  const int64_t rows = (Q + 2 * KV) * n;
  L.attn.wq = prepare_linear(ld.matrix_rows(qkv, E, rows, r * Q, Q));
  L.attn.wk = prepare_linear(ld.matrix_rows(qkv, E, rows, n * Q + r * KV, KV));
  L.attn.wv = prepare_linear(ld.matrix_rows(qkv, E, rows, n * (Q + KV) + r * KV, KV));
  L.attn.wo = load_linear(ld, blk(il, "attn_output.weight"), Q, E, Share::kCols);
}

void DecoderModel::load_post_norms(ModelLoader& ld, int64_t il, DecoderLayer& L) const {
  L.attn_post_norm = ld.vector(blk(il, "post_attention_norm.weight"), cfg_.n_embd);
  L.ffn_post_norm = ld.vector(blk(il, "post_ffw_norm.weight"), cfg_.n_embd);
}

void DecoderModel::load_qk_norm(ModelLoader& ld, int64_t il, DecoderLayer& L) const {
  L.attn.q_norm = ld.vector(blk(il, "attn_q_norm.weight"), cfg_.head_dim);
  L.attn.k_norm = ld.vector(blk(il, "attn_k_norm.weight"), cfg_.head_dim);
}

void DecoderModel::load_ffn(ModelLoader& ld, int64_t il, DecoderLayer& L) const {
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff;
  L.ffn_norm = ld.vector(blk(il, "ffn_norm.weight"), E);
  L.ffn.gate = load_linear(ld, blk(il, "ffn_gate.weight"), E, F, Share::kRows);
  L.ffn.up = load_linear(ld, blk(il, "ffn_up.weight"), E, F, Share::kRows);
  L.ffn.down = load_linear(ld, blk(il, "ffn_down.weight"), F, E, Share::kCols);
  if (!ffn_thresholds_.empty()) L.ffn_sparsity = make_ffn_sparsity(ffn_thresholds_[il], L.ffn.down.view);
}

void DecoderModel::load_ffn_fused(ModelLoader& ld, int64_t il, DecoderLayer& L) const {
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff;
  L.ffn_norm = ld.vector(blk(il, "ffn_norm.weight"), E);
  const int64_t n = split_.size, r = split_.rank;  // this rank's neurons of each part
  const std::string gate_up = blk(il, "ffn_up.weight");
  L.ffn.gate = prepare_linear(ld.matrix_rows(gate_up, E, 2 * F * n, r * F, F));
  L.ffn.up = prepare_linear(ld.matrix_rows(gate_up, E, 2 * F * n, n * F + r * F, F));
  L.ffn.down = load_linear(ld, blk(il, "ffn_down.weight"), F, E, Share::kCols);
  if (!ffn_thresholds_.empty()) L.ffn_sparsity = make_ffn_sparsity(ffn_thresholds_[il], L.ffn.down.view);
}

void DecoderModel::decide_expert_layout(const gguf::File& f) {
  uint64_t bytes = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.name.find("_exps.") != std::string::npos) bytes += t.n_bytes;
  }
  const uint64_t available = memory_available_bytes();
  const char* force = std::getenv("TESSERA_EXPERTS_IN_PLACE");
  experts_in_place_ = force != nullptr && *force != '\0' ? std::string_view(force) == "1" : bytes > available / 2;
  if (experts_in_place_) {
    TESSERA_LOG_INFO("experts: {:.2f} GiB used in place from the mapped file (page cache), not repacked ({}; "
                     "{:.2f} GiB of memory available)", static_cast<double>(bytes) / (1 << 30),
                     force != nullptr && *force != '\0' ? "TESSERA_EXPERTS_IN_PLACE=1" : "more than half of it",
                     static_cast<double>(available) / (1 << 30));
  }
}

void DecoderModel::load_attention_bias_and_sinks(ModelLoader& ld, int64_t il, DecoderLayer& L) const {
  L.attn.bo = ld.vector(blk(il, "attn_output.bias"), cfg_.n_embd);
  if (split_.rank != 0) L.attn.bo.clear();  // added once, by rank 0, before the sum
  L.attn.sinks = own_part(ld.vector(blk(il, "attn_sinks.weight"), cfg_.n_head * split_.size), cfg_.n_head);
}

void DecoderModel::load_moe(ModelLoader& ld, int64_t il, DecoderLayer& L, const char* norm) const {
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff_exp, NE = cfg_.n_expert;
  L.ffn_norm = ld.vector(blk(il, norm), E);
  MoeWeights& m = L.moe;
  m.router = kernels::prepare_weight(ld.matrix(blk(il, "ffn_gate_inp.weight"), E, NE));
  const std::string gate_name = blk(il, "ffn_gate_exps.weight");
  const gguf::TensorInfo* g = ld.file().find_tensor(gate_name);
  if (g != nullptr && g->type == DType::kQMoE) {
    TESSERA_CHECK(experts_by_rank_ || !split_.split(), kCorruptFile, "{}: QMoE experts in layer {} but not in layer 0",
                  ld.file().path(), il);
    m.qmoe = true;
    m.q_gate = ld.qmoe_experts(gate_name, E, F, NE);
    m.q_up = ld.qmoe_experts(blk(il, "ffn_up_exps.weight"), E, F, NE);
    m.q_down = ld.qmoe_experts(blk(il, "ffn_down_exps.weight"), F, E, NE);
  } else {
    load_experts(ld, il, m);
  }
  if (cfg_.n_ff_shexp > 0) {
    const int64_t S = cfg_.n_ff_shexp;
    const int64_t n = split_.size, r = split_.rank;  // this rank's shared neurons
    m.shared_gate = kernels::prepare_weight(ld.matrix(blk(il, "ffn_gate_inp_shexp.weight"), E, 1));
    m.shared.gate = kernels::prepare_weight(ld.matrix_rows(blk(il, "ffn_gate_shexp.weight"), E, S * n, r * S, S));
    m.shared.up = kernels::prepare_weight(ld.matrix_rows(blk(il, "ffn_up_shexp.weight"), E, S * n, r * S, S));
    m.shared.down = kernels::prepare_weight(ld.matrix_cols(blk(il, "ffn_down_shexp.weight"), S * n, E, r * S, S));
  }
}

void DecoderModel::load_moe_biases(ModelLoader& ld, int64_t il, MoeWeights& m) const {
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff_exp, NE = cfg_.n_expert, n = split_.size, r = split_.rank;
  m.router_bias = ld.vector(blk(il, "ffn_gate_inp.bias"), NE);
  if (experts_by_rank_) {  // whole experts: their biases whole, each added by its rank
    m.gate_bias = ld.vectors(blk(il, "ffn_gate_exps.bias"), F, NE);
    m.up_bias = ld.vectors(blk(il, "ffn_up_exps.bias"), F, NE);
    m.down_bias = ld.vectors(blk(il, "ffn_down_exps.bias"), E, NE);
    return;
  }
  // Each expert's part of its gate / up biases; down's bias added by rank 0 only.
  const auto own = [&](const std::vector<float>& all) {
    std::vector<float> part;
    for (int64_t e = 0; e < NE; ++e) {
      const auto first = all.begin() + (e * n + r) * F;
      part.insert(part.end(), first, first + F);
    }
    return part;
  };
  m.gate_bias = own(ld.vectors(blk(il, "ffn_gate_exps.bias"), F * n, NE));
  m.up_bias = own(ld.vectors(blk(il, "ffn_up_exps.bias"), F * n, NE));
  m.down_bias = ld.vectors(blk(il, "ffn_down_exps.bias"), E, NE);
  if (r != 0) m.down_bias.clear();
}

void DecoderModel::load_experts(ModelLoader& ld, int64_t il, MoeWeights& m) const {
  const auto prepare = [this](const kernels::WeightView& v) {
    if (!experts_in_place_) return released(kernels::prepare_weight(v));
    kernels::PreparedWeight p;
    p.view = v;
    return p;
  };
  // F: this rank's neurons of each expert (all of them unless split).
  // (A rank's parts only: on demand, only their bytes are touched.)
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff_exp, NE = cfg_.n_expert, n = split_.size, r = split_.rank;
  const std::string gate = blk(il, "ffn_gate_exps.weight"), up = blk(il, "ffn_up_exps.weight");
  const std::string down = blk(il, "ffn_down_exps.weight");
  m.experts.resize(static_cast<size_t>(NE));
  for (int64_t e = 0; e < NE; ++e) {
    m.experts[e].gate = prepare(ld.expert_rows(gate, E, F * n, NE, e, r * F, F));
    m.experts[e].up = prepare(ld.expert_rows(up, E, F * n, NE, e, r * F, F));
    m.experts[e].down = without_copy(ld.file(), prepare(ld.expert_cols(down, F * n, E, NE, e, r * F, F)));
  }
}

namespace {

// Rows [0, n) of x (stride ld) += expert e's bias (width `width` in `bias`),
// when the mixture has biases.
void add_expert_bias(const std::vector<float>& bias, int64_t e, int64_t width, float* x, int64_t ld, int64_t n) {
  if (!bias.empty()) add_bias(x, ld, n, bias.data() + e * width, width);
}

// order[0, k) = the indices of v's k largest values, largest first (ties:
// lower index).
void top_k(const float* v, int64_t k, std::vector<int32_t>& order) {
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
}

// gpt-oss's routing (llama.cpp's SOFTMAX_WEIGHT): the k largest logits
// (ties: lower id), weighted by a softmax over those k logits alone.
void choose_by_logit(const float* logit, int64_t k, std::vector<int32_t>& order, int32_t* choice,
                     float* weight) {
  top_k(logit, k, order);
  const float mx = logit[order[0]];
  double sum = 0.0;
  for (int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(logit[order[j]] - mx));
  for (int64_t j = 0; j < k; ++j) {
    choice[j] = order[j];
    weight[j] = static_cast<float>(std::exp(static_cast<double>(logit[order[j]] - mx)) / sum);
  }
}

// Mixtral's, Qwen's routing: a softmax over every expert's logit (p becomes
// the probabilities), the k most probable (ties: lower id), their
// probabilities renormalised to sum to 1 or as they are.
void choose_by_probability(float* p, int64_t n_expert, int64_t k, bool renormalise, std::vector<int32_t>& order,
                           int32_t* choice, float* weight) {
  const float mx = *std::max_element(p, p + n_expert);
  double sum = 0.0;
  for (int64_t e = 0; e < n_expert; ++e) {
    p[e] = std::exp(p[e] - mx);
    sum += p[e];
  }
  for (int64_t e = 0; e < n_expert; ++e) p[e] = static_cast<float>(p[e] / sum);
  top_k(p, k, order);
  double chosen = 0.0;
  for (int64_t j = 0; j < k; ++j) chosen += p[order[j]];
  for (int64_t j = 0; j < k; ++j) {
    choice[j] = order[j];
    const float w = p[order[j]];
    weight[j] = renormalise ? static_cast<float>(w / chosen) : w;
  }
}

// y[0..n) += w * x[0..n): a chosen expert's output into its token's sum.
void add_scaled(float* y, const float* x, float w, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += w * x[j];
}

size_t ffn_bytes(const FfnWeights& f) {
  return matrix_bytes(f.gate.view) + matrix_bytes(f.up.view) + matrix_bytes(f.down.view);
}

int64_t macs(const kernels::PreparedWeight& w) { return w.view.rows * w.view.cols; }

int64_t ffn_macs(const FfnWeights& f) { return macs(f.gate) + macs(f.up) + macs(f.down); }

}  // namespace

// A token of a mixture reads the router, its n_expert_used experts and the
// shared expert (the experts of one layer are the same size).
size_t DecoderModel::bytes_per_token() const {
  size_t n = tok_embd_.row_bytes + matrix_bytes(output_.view);
  for (const DecoderLayer& L : layers_) {
    n += matrix_bytes(L.attn.wq.view) + matrix_bytes(L.attn.wk.view) + matrix_bytes(L.attn.wv.view) +
         matrix_bytes(L.attn.wo.view) + ffn_bytes(L.ffn);
    if (!L.moe.experts.empty() || L.moe.qmoe) {
      // QMoE: an expert's share of its tensors' bytes (experts differ in size).
      const size_t expert = L.moe.qmoe ? (L.moe.q_gate.n_bytes + L.moe.q_up.n_bytes + L.moe.q_down.n_bytes) /
                                             static_cast<size_t>(cfg_.n_expert)
                                       : ffn_bytes(L.moe.experts[0]);
      const size_t used = static_cast<size_t>(cfg_.n_expert_used) / (experts_by_rank_ ? split_.size : 1);
      n += matrix_bytes(L.moe.router.view) + expert * std::max<size_t>(used, 1) +
           ffn_bytes(L.moe.shared) + matrix_bytes(L.moe.shared_gate.view);
    }
  }
  return n;
}

Model::MatmulWork DecoderModel::matmul_work() const {
  MatmulWork work;
  for (const DecoderLayer& L : layers_) {
    work.per_token += macs(L.attn.wq) + macs(L.attn.wk) + macs(L.attn.wv) + macs(L.attn.wo) + ffn_macs(L.ffn);
    if (!L.moe.experts.empty() || L.moe.qmoe) {
      const int64_t used = std::max<int64_t>(cfg_.n_expert_used / (experts_by_rank_ ? split_.size : 1), 1);
      work.per_token += macs(L.moe.router) + 3 * cfg_.n_embd * cfg_.n_ff_exp * used +
                        ffn_macs(L.moe.shared) + macs(L.moe.shared_gate);
    }
  }
  work.per_logit_row = macs(output_);
  return work;
}

void DecoderModel::norm(const std::vector<float>& w, const char* name, int64_t il, int64_t T, ForwardState& s) const {
  const int64_t E = cfg_.n_embd;
  for (int64_t t = 0; t < T; ++t) {
    kernels::rmsnorm(s.x.data() + t * E, w.data(), s.xb.data() + t * E, E, cfg_.rms_eps, s.ctx.isa);
  }
  if (s.tap) s.tap(name, il, s.xb.data(), T, E, E);
}

void DecoderModel::qkv(const AttentionWeights& w, int64_t il, const ForwardBatch& batch, ForwardState& s) const {
  const int64_t T = batch.n_tokens(), E = cfg_.n_embd, Q = cfg_.q_dim(), KV = cfg_.kv_dim();
  const kernels::MatmulOutput out[] = {{&w.wq, s.q.data(), Q}, {&w.wk, s.k.data(), KV}, {&w.wv, s.v.data(), KV}};
  kernels::matmul_shared_input(out, s.xb.data(), E, T, s.ctx);
  apply_lora(batch, il, LoraTarget::kQ, s.xb.data(), E, s.q.data(), Q, s.ctx);
  apply_lora(batch, il, LoraTarget::kK, s.xb.data(), E, s.k.data(), KV, s.ctx);
  apply_lora(batch, il, LoraTarget::kV, s.xb.data(), E, s.v.data(), KV, s.ctx);
  if (!w.bq.empty()) {
    add_bias(s.q.data(), Q, T, w.bq);
    add_bias(s.k.data(), KV, T, w.bk);
    add_bias(s.v.data(), KV, T, w.bv);
  }
}

void DecoderModel::qk_norm(const AttentionWeights& w, int64_t T, ForwardState& s) const {
  const int64_t hd = cfg_.head_dim;
  // Rows of head_dim, normalised in place.
  for (int64_t r = 0; r < T * cfg_.n_head; ++r) {
    float* x = s.q.data() + r * hd;
    kernels::rmsnorm(x, w.q_norm.data(), x, hd, cfg_.rms_eps, s.ctx.isa);
  }
  for (int64_t r = 0; r < T * cfg_.n_head_kv; ++r) {
    float* x = s.k.data() + r * hd;
    kernels::rmsnorm(x, w.k_norm.data(), x, hd, cfg_.rms_eps, s.ctx.isa);
  }
}

void DecoderModel::rope(int64_t il, int64_t T, ForwardState& s) const {
  const int64_t Q = cfg_.q_dim(), KV = cfg_.kv_dim(), half = cfg_.n_rot / 2;
  const bool local = layers_[il].local_rope;
  for (int64_t t = 0; t < T; ++t) {
    const float* c = (local ? s.rope_cos_swa : s.rope_cos).data() + t * half;
    const float* sn = (local ? s.rope_sin_swa : s.rope_sin).data() + t * half;
    kernels::rope_rotate(s.q.data() + t * Q, cfg_.n_head, cfg_.head_dim, rope_, c, sn, s.ctx.isa);
    kernels::rope_rotate(s.k.data() + t * KV, cfg_.n_head_kv, cfg_.head_dim, rope_, c, sn, s.ctx.isa);
  }
  if (s.tap) {
    s.tap("q", il, s.q.data(), T, Q, Q);
    s.tap("k", il, s.k.data(), T, KV, KV);
    s.tap("v", il, s.v.data(), T, KV, KV);
  }
}

std::span<const kernels::AttentionSeq> DecoderModel::layer_seqs(const ForwardBatch& batch, int64_t il,
                                                                ForwardState& s) const {
  if (batch.key_depth.empty()) return batch.seqs;
  // SpAtten's cascade: the slots hidden from this layer read as empty.
  s.layer_seqs.assign(batch.seqs.begin(), batch.seqs.end());
  s.layer_key_pos.resize(batch.seqs.size());
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const uint8_t* depth = batch.key_depth[i];
    if (depth == nullptr) continue;
    kernels::AttentionSeq& q = s.layer_seqs[i];
    std::vector<int32_t>& kp = s.layer_key_pos[i];
    kp.assign(q.key_pos, q.key_pos + q.kv_len);
    for (int32_t j = 0; j < q.kv_len; ++j) {
      if (depth[j] <= il) kp[j] = -1;
    }
    q.key_pos = kp.data();
  }
  return s.layer_seqs;
}

void DecoderModel::add_residual(const std::vector<float>& post_norm, const char* name, int64_t il, int64_t T,
                                ForwardState& s) const {
  const int64_t E = cfg_.n_embd;
  // A split product's partial sums become the whole update on every rank.
  if (split_.split()) split_.group->sum({s.xb2.data(), static_cast<size_t>(T * E)});
  if (!post_norm.empty()) {
    for (int64_t t = 0; t < T; ++t) {
      float* row = s.xb2.data() + t * E;
      kernels::rmsnorm(row, post_norm.data(), row, E, cfg_.rms_eps, s.ctx.isa);
    }
    if (post_rotation_) kernels::rotate_rows(*post_rotation_, s.xb2.data(), T, E, s.ctx);
    if (s.tap) s.tap(name, il, s.xb2.data(), T, E, E);
  }
  kernels::add_inplace(s.x.data(), s.xb2.data(), T * E, s.ctx.isa);
}

void DecoderModel::split_product(const kernels::PreparedWeight& w, const float* x, int64_t cols, int64_t T, float* y,
                                 ForwardState& s) const {
  const int64_t E = cfg_.n_embd;
  if (!split_.split() || !w.w8) return kernels::matmul(w, x, cols, T, y, E, s.ctx);
  const int n = split_.size;
  s.amax_part.assign(static_cast<size_t>(T), 0.0f);
  s.amax_gathered.resize(static_cast<size_t>(T * n));
  for (int64_t t = 0; t < T; ++t) {
    float& m = s.amax_part[static_cast<size_t>(t)];
    for (int64_t k = 0; k < cols; ++k) m = std::fabs(x[t * cols + k]) > m ? std::fabs(x[t * cols + k]) : m;  // NaN skipped
  }
  split_.group->all_gather(s.amax_part, s.amax_gathered);
  for (int64_t t = 0; t < T; ++t) {
    for (int r = 0; r < n; ++r) s.amax_part[t] = std::max(s.amax_part[t], s.amax_gathered[r * T + t]);
  }
  kernels::matmul_w8a8(*w.w8, x, cols, T, y, E, s.ctx, s.amax_part.data());
}

void DecoderModel::rotate_ffn_product(int64_t T, ForwardState& s) const {
  const int64_t F = cfg_.n_ff;
  if (!split_.split()) return kernels::rotate_rows(*ffn_rotation_, s.ff_gate.data(), T, F, s.ctx);
  // R_f mixes every neuron: rotate whole rows, gathered, and keep this rank's part.
  const int64_t n = split_.size, W = F * n;
  s.parts_gathered.ensure(static_cast<size_t>(2 * T * W));
  float* gathered = s.parts_gathered.data();  // [rank][T][F]
  float* rows = gathered + T * W;             // [T][rank][F]
  split_.group->all_gather({s.ff_gate.data(), static_cast<size_t>(T * F)}, {gathered, static_cast<size_t>(T * W)});
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t t = 0; t < T; ++t) std::copy_n(gathered + (r * T + t) * F, F, rows + t * W + r * F);
  }
  kernels::rotate_rows(*ffn_rotation_, rows, T, W, s.ctx);
  for (int64_t t = 0; t < T; ++t) std::copy_n(rows + t * W + split_.rank * F, F, s.ff_gate.data() + t * F);
}

void DecoderModel::attention(const DecoderLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv,
                             ForwardState& s) const {
  const int64_t T = batch.n_tokens(), E = cfg_.n_embd, Q = cfg_.q_dim(), KV = cfg_.kv_dim();
  const kernels::KvLayerView layer = kv.layer(il);
  const kernels::NewKv fresh{s.k.data(), s.v.data(), KV, batch.slots.data(), T};
  kernels::AttentionShape shape;
  shape.n_heads = static_cast<int32_t>(cfg_.n_head);
  shape.scale = cfg_.attn_scale > 0.0f ? cfg_.attn_scale : 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
  shape.window = L.window;
  shape.softcap = cfg_.attn_softcap;
  shape.sinks = L.attn.sinks.empty() ? nullptr : L.attn.sinks.data();
  kernels::paged_attention(layer, s.q.data(), Q, s.att.data(), Q, layer_seqs(batch, il, s), shape, s.ctx, &fresh);
  if (s.tap) s.tap("attn_out", il, s.att.data(), T, Q, Q);
  split_product(L.attn.wo, s.att.data(), Q, T, s.xb2.data(), s);
  if (!L.attn.bo.empty()) add_bias(s.xb2.data(), E, T, L.attn.bo);
  apply_lora(batch, il, LoraTarget::kO, s.att.data(), Q, s.xb2.data(), E, s.ctx);
  add_residual(L.attn_post_norm, "attn_post_norm", il, T, s);
}

void DecoderModel::gated_ffn(const DecoderLayer& L, FfnAct act, int64_t il, const ForwardBatch& batch,
                             ForwardState& s) const {
  if (L.ffn_sparsity.on) return sparse_gated_ffn(L, act, il, batch, s);
  const FfnWeights& w = L.ffn;
  const int64_t T = batch.n_tokens(), E = cfg_.n_embd, F = cfg_.n_ff;
  const kernels::MatmulOutput gate_up[] = {{&w.gate, s.ff_gate.data(), F}, {&w.up, s.ff_up.data(), F}};
  kernels::matmul_shared_input(gate_up, s.xb.data(), E, T, s.ctx);
  apply_lora(batch, il, LoraTarget::kGate, s.xb.data(), E, s.ff_gate.data(), F, s.ctx);
  apply_lora(batch, il, LoraTarget::kUp, s.xb.data(), E, s.ff_up.data(), F, s.ctx);
  if (s.tap) tap_gate_activation(act, il, T, s);
  ffn_activate(act, s.ff_gate.data(), s.ff_up.data(), T * F, s.ctx.isa);
  if (ffn_rotation_) rotate_ffn_product(T, s);
  if (s.tap) s.tap("ffn_act", il, s.ff_gate.data(), T, F, F);  // the input of W_down
  split_product(w.down, s.ff_gate.data(), F, T, s.xb2.data(), s);
  apply_lora(batch, il, LoraTarget::kDown, s.ff_gate.data(), F, s.xb2.data(), E, s.ctx);
  add_residual(L.ffn_post_norm, "ffn_post_norm", il, T, s);
  if (s.tap) s.tap("layer_out", il, s.x.data(), T, E, E);
}

void DecoderModel::tap_gate_activation(FfnAct act, int64_t il, int64_t T, ForwardState& s) const {
  if (act == FfnAct::kSwigluOai) return;
  const int64_t F = cfg_.n_ff;
  std::vector<float> a(static_cast<size_t>(T * F));
  for (int64_t i = 0; i < T * F; ++i) {
    a[static_cast<size_t>(i)] = static_cast<float>(activation_value(act == FfnAct::kGeluTanh, s.ff_gate[i]));
  }
  s.tap("ffn_gate_act", il, a.data(), T, F, F);
}

void DecoderModel::route(const MoeWeights& m, MoeWeighting weighting, int64_t il, int64_t T, ForwardState& s) const {
  const int64_t E = cfg_.n_embd, NE = cfg_.n_expert, K = cfg_.n_expert_used;
  s.router.ensure(static_cast<size_t>(T * NE));
  kernels::matmul(m.router, s.xb.data(), E, T, s.router.data(), NE, s.ctx);
  if (!m.router_bias.empty()) add_bias(s.router.data(), NE, T, m.router_bias);
  s.moe_choice.resize(static_cast<size_t>(T * K));
  s.moe_weight.resize(static_cast<size_t>(T * K));
  std::vector<int32_t> order(static_cast<size_t>(NE));
  for (int64_t t = 0; t < T; ++t) {
    float* p = s.router.data() + t * NE;
    int32_t* choice = s.moe_choice.data() + t * K;
    float* weight = s.moe_weight.data() + t * K;
    if (weighting == MoeWeighting::kSoftmaxOfChosen) {
      choose_by_logit(p, K, order, choice, weight);
    } else {
      choose_by_probability(p, NE, K, weighting == MoeWeighting::kRenormalised, order, choice, weight);
    }
  }
  if (s.tap) s.tap("ffn_moe_probs", il, s.router.data(), T, NE, NE);
  // Counting sort of the (token, weight) pairs by expert, tokens in order.
  s.moe_offsets.assign(static_cast<size_t>(NE + 1), 0);
  for (int32_t e : s.moe_choice) ++s.moe_offsets[e + 1];
  for (int64_t e = 0; e < NE; ++e) s.moe_offsets[e + 1] += s.moe_offsets[e];
  s.moe_tokens.resize(s.moe_choice.size());
  s.moe_token_weight.resize(s.moe_choice.size());
  std::vector<int32_t> fill(s.moe_offsets.begin(), s.moe_offsets.end() - 1);
  for (int64_t i = 0; i < T * K; ++i) {
    const int32_t at = fill[s.moe_choice[i]]++;
    s.moe_tokens[at] = static_cast<int32_t>(i / K);
    s.moe_token_weight[at] = s.moe_weight[i];
  }
}

void DecoderModel::dense_expert_ffn(const FfnWeights& w, int64_t F, int64_t n, FfnAct act, ForwardState& s) const {
  const int64_t E = cfg_.n_embd;
  const kernels::MatmulOutput gate_up[] = {{&w.gate, s.ff_gate.data(), F}, {&w.up, s.ff_up.data(), F}};
  kernels::matmul_shared_input(gate_up, s.moe_in.data(), E, n, s.ctx);
  ffn_activate(act, s.ff_gate.data(), s.ff_up.data(), n * F, s.ctx.isa);
  kernels::matmul(w.down, s.ff_gate.data(), F, n, s.moe_out.data(), E, s.ctx);
}

// Calibration (quant/calibration.h): each expert's rows of the step, as its
// gate / up and its down read them.
void DecoderModel::tap_experts(int64_t il, ForwardState& s) const {
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff_exp;
  for (int64_t e = 0; e < cfg_.n_expert; ++e) {
    const int64_t begin = s.moe_offsets[e], n = s.moe_offsets[e + 1] - begin;
    if (n == 0) continue;
    s.tap(fmt::format("ffn_moe_in.{}", e), il, s.moe_in.data() + begin * E, n, E, E);
    s.tap(fmt::format("ffn_moe_act.{}", e), il, s.ff_gate.data() + begin * F, n, F, F);
  }
}

void DecoderModel::expert_ffn(const MoeWeights& m, int64_t e, FfnAct act, ForwardState& s) const {
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff_exp;
  if (m.qmoe) {
    kernels::qmoe_matmul(m.q_gate, e, s.moe_in.data(), E, 1, s.ff_gate.data(), F, s.ctx);
    kernels::qmoe_matmul(m.q_up, e, s.moe_in.data(), E, 1, s.ff_up.data(), F, s.ctx);
  } else {
    const kernels::MatmulOutput gate_up[] = {{&m.experts[e].gate, s.ff_gate.data(), F},
                                             {&m.experts[e].up, s.ff_up.data(), F}};
    kernels::matmul_shared_input(gate_up, s.moe_in.data(), E, 1, s.ctx);
  }
  add_expert_bias(m.gate_bias, e, F, s.ff_gate.data(), F, 1);
  add_expert_bias(m.up_bias, e, F, s.ff_up.data(), F, 1);
  ffn_activate(act, s.ff_gate.data(), s.ff_up.data(), F, s.ctx.isa);
  if (m.qmoe) {
    kernels::qmoe_matmul(m.q_down, e, s.ff_gate.data(), F, 1, s.moe_out.data(), E, s.ctx);
  } else {
    kernels::matmul(m.experts[e].down, s.ff_gate.data(), F, 1, s.moe_out.data(), E, s.ctx);
  }
  add_expert_bias(m.down_bias, e, E, s.moe_out.data(), E, 1);
}

// One pass per chosen expert over all of its tokens of the step, every
// expert in one dispatch (kernels::matmul_grouped): the step's rows are
// gathered in expert order, gate and up of every expert run together, then
// every down; each token's sum is in expert order, whatever the batch.
void DecoderModel::grouped_experts(const MoeWeights& m, FfnAct act, int64_t il, ForwardState& s) const {
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff_exp, NE = cfg_.n_expert;
  const int64_t rows = static_cast<int64_t>(s.moe_tokens.size());
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(s.xb.data() + static_cast<int64_t>(s.moe_tokens[i]) * E, E, s.moe_in.data() + i * E);
  }
  std::vector<kernels::GroupedMatmul>& jobs = s.moe_jobs;
  std::vector<kernels::QmoeJob>& qjobs = s.qmoe_jobs;
  jobs.clear();
  qjobs.clear();
  for (int64_t e = 0; e < NE; ++e) {
    const int64_t begin = s.moe_offsets[e], n = s.moe_offsets[e + 1] - begin;
    if (n == 0 || !owns_expert(e)) continue;
    const float* x = s.moe_in.data() + begin * E;
    if (m.qmoe) {
      qjobs.push_back({&m.q_gate, e, x, E, n, s.ff_gate.data() + begin * F, F});
      qjobs.push_back({&m.q_up, e, x, E, n, s.ff_up.data() + begin * F, F});
    } else {
      jobs.push_back({&m.experts[e].gate, x, E, n, s.ff_gate.data() + begin * F, F});
      jobs.push_back({&m.experts[e].up, x, E, n, s.ff_up.data() + begin * F, F});
    }
    s.expert_tokens[il * NE + e] += n;
    s.expert_passes[il * NE + e] += 1;
  }
  kernels::matmul_grouped(jobs, s.ctx);
  kernels::qmoe_matmul_grouped(qjobs, s.ctx);
  for (int64_t e = 0; e < NE && !m.gate_bias.empty(); ++e) {
    const int64_t begin = s.moe_offsets[e], n = owns_expert(e) ? s.moe_offsets[e + 1] - begin : 0;
    add_expert_bias(m.gate_bias, e, F, s.ff_gate.data() + begin * F, F, n);
    add_expert_bias(m.up_bias, e, F, s.ff_up.data() + begin * F, F, n);
  }
  ffn_activate(act, s.ff_gate.data(), s.ff_up.data(), rows * F, s.ctx.isa);
  if (s.tap) tap_experts(il, s);
  jobs.clear();
  qjobs.clear();
  for (int64_t e = 0; e < NE; ++e) {
    const int64_t begin = s.moe_offsets[e], n = s.moe_offsets[e + 1] - begin;
    if (n == 0 || !owns_expert(e)) continue;
    float* x = s.ff_gate.data() + begin * F;
    if (m.qmoe) {
      qjobs.push_back({&m.q_down, e, x, F, n, s.moe_out.data() + begin * E, E});
    } else {
      jobs.push_back({&m.experts[e].down, x, F, n, s.moe_out.data() + begin * E, E});
    }
  }
  kernels::matmul_grouped(jobs, s.ctx);
  kernels::qmoe_matmul_grouped(qjobs, s.ctx);
  for (int64_t e = 0; e < NE && !m.down_bias.empty(); ++e) {
    const int64_t begin = s.moe_offsets[e], n = owns_expert(e) ? s.moe_offsets[e + 1] - begin : 0;
    add_expert_bias(m.down_bias, e, E, s.moe_out.data() + begin * E, E, n);
  }
  for (int64_t e = 0; e < NE; ++e) {  // each token's experts in expert order
    if (!owns_expert(e)) continue;
    for (int64_t i = s.moe_offsets[e]; i < s.moe_offsets[e + 1]; ++i) {
      add_scaled(s.xb2.data() + static_cast<int64_t>(s.moe_tokens[i]) * E, s.moe_out.data() + i * E,
                 s.moe_token_weight[i], E);
    }
  }
}

// The baseline grouping is measured against (TESSERA_MOE_PER_TOKEN=1): each
// token's experts in turn, one row at a time, so an expert's weights are
// read once per token that chose it. Same sums, in the same order.
void DecoderModel::per_token_experts(const MoeWeights& m, FfnAct act, int64_t il, int64_t T, ForwardState& s) const {
  const int64_t E = cfg_.n_embd, NE = cfg_.n_expert, K = cfg_.n_expert_used;
  std::vector<int32_t> order(static_cast<size_t>(K));
  for (int64_t t = 0; t < T; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s.moe_choice[t * K + a] < s.moe_choice[t * K + b]; });
    for (int32_t k : order) {
      const int32_t e = s.moe_choice[t * K + k];
      if (!owns_expert(e)) continue;
      std::copy_n(s.xb.data() + t * E, E, s.moe_in.data());
      expert_ffn(m, e, act, s);
      add_scaled(s.xb2.data() + t * E, s.moe_out.data(), s.moe_weight[t * K + k], E);
      s.expert_tokens[il * NE + e] += 1;
      s.expert_passes[il * NE + e] += 1;
    }
  }
}

void DecoderModel::moe_ffn(const DecoderLayer& L, MoeWeighting weighting, int64_t il, const ForwardBatch& batch,
                           ForwardState& s, FfnAct act) const {
  const MoeWeights& m = L.moe;
  const int64_t T = batch.n_tokens(), E = cfg_.n_embd, NE = cfg_.n_expert;
  route(m, weighting, il, T, s);
  std::fill_n(s.xb2.data(), T * E, 0.0f);
  if (s.expert_tokens.size() != static_cast<size_t>(cfg_.n_layer * NE)) {
    s.expert_tokens.assign(static_cast<size_t>(cfg_.n_layer * NE), 0);
    s.expert_passes.assign(static_cast<size_t>(cfg_.n_layer * NE), 0);
  }
  if (moe_per_token_) {
    per_token_experts(m, act, il, T, s);
  } else {
    grouped_experts(m, act, il, s);
  }
  if (cfg_.n_ff_shexp > 0) {
    // The shared expert, on every token, scaled by sigmoid(x . gate_inp_shexp).
    std::copy_n(s.xb.data(), T * E, s.moe_in.data());
    float* gate = s.router.data();  // the router's probabilities are no longer needed
    kernels::matmul(m.shared_gate, s.xb.data(), E, T, gate, 1, s.ctx);
    for (int64_t t = 0; t < T; ++t) gate[t] = 1.0f / (1.0f + std::exp(-gate[t]));
    dense_expert_ffn(m.shared, cfg_.n_ff_shexp, T, FfnAct::kSilu, s);
    for (int64_t t = 0; t < T; ++t) add_scaled(s.xb2.data() + t * E, s.moe_out.data() + t * E, gate[t], E);
  }
  add_residual(L.ffn_post_norm, "ffn_post_norm", il, T, s);
  if (s.tap) s.tap("layer_out", il, s.x.data(), T, E, E);
}

void DecoderModel::shift_keys(const std::vector<kv::KeyShift>& shifts, KvCache& kv, ForwardState& s) const {
  const int64_t half = cfg_.n_rot / 2;
  const size_t n = shifts.size();
  std::vector<int64_t> slots(n);
  for (size_t i = 0; i < n; ++i) slots[i] = shifts[i].slot;
  // The rotation by each shift's delta with `p`, into cos / sin. YaRN and
  // attn_factor scale cos and sin: applied once, when the key was stored, so
  // a shift must be a pure rotation. (Phi-3's long factors are not used here:
  // keys past their start are shifted with the short ones.)
  auto angles = [&](const kernels::RopeParams& p, AlignedBuffer<float>& cos, AlignedBuffer<float>& sin) {
    cos.ensure(n * static_cast<size_t>(half));
    sin.ensure(n * static_cast<size_t>(half));
    const bool scaled = p.ext_factor != 0.0f || p.attn_factor != 1.0f;
    for (size_t i = 0; i < n; ++i) {
      float* c = cos.data() + i * half;
      float* sn = sin.data() + i * half;
      if (i > 0 && shifts[i].delta == shifts[i - 1].delta) {
        std::copy_n(c - half, half, c);
        std::copy_n(sn - half, half, sn);
        continue;
      }
      kernels::rope_angles(shifts[i].delta, p, c, sn);
      for (int64_t j = 0; scaled && j < half; ++j) {
        const float r = std::hypot(c[j], sn[j]);
        c[j] /= r;
        sn[j] /= r;
      }
    }
  };
  angles(rope_, s.rope_cos, s.rope_sin);
  if (cfg_.swa_window > 0) angles(rope_swa_, s.rope_cos_swa, s.rope_sin_swa);
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    const bool local = layers_[il].local_rope;
    kernels::rotate_keys(kv.layer(il), slots.data(), static_cast<int64_t>(n),
                         (local ? s.rope_cos_swa : s.rope_cos).data(), (local ? s.rope_sin_swa : s.rope_sin).data(),
                         half, rope_.neox);
  }
}

void DecoderModel::forward(const ForwardBatch& batch, KvCache& kv, ForwardState& s) const {
  kv.apply(batch.copies);
  if (!batch.key_shifts.empty()) shift_keys(batch.key_shifts, kv, s);
  const int64_t T = batch.n_tokens(), E = cfg_.n_embd, V = cfg_.n_vocab;
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  TESSERA_ASSERT(batch.positions.size() == batch.tokens.size() && batch.slots.size() == batch.tokens.size());
  if (T == 0) return;
  const size_t t = static_cast<size_t>(T);
  s.x.ensure(t * E);
  s.xb.ensure(t * E);
  s.xb2.ensure(t * E);
  s.q.ensure(t * cfg_.q_dim());
  s.att.ensure(t * cfg_.q_dim());
  s.k.ensure(t * cfg_.kv_dim());
  s.v.ensure(t * cfg_.kv_dim());
  // A mixture's expert rows: every token k times (grouped_experts).
  const size_t moe_rows = t * static_cast<size_t>(std::max<int64_t>(cfg_.n_expert_used, 1));
  const size_t ff = std::max({t * cfg_.n_ff, moe_rows * cfg_.n_ff_exp, t * cfg_.n_ff_shexp});
  s.ff_gate.ensure(ff);
  s.ff_up.ensure(ff);
  if (cfg_.moe()) {
    s.moe_in.ensure(moe_rows * E);
    s.moe_out.ensure(moe_rows * E);
  }
  s.logits.ensure(static_cast<size_t>(R) * V);
  if (s.ctx.ws == nullptr) s.ctx.ws = &s.ws;

  TESSERA_ASSERT(batch.embd_rows.empty() || batch.embd_rows.size() == batch.tokens.size());
  for (int64_t i = 0; i < T; ++i) {
    float* row = s.x.data() + i * E;
    if (!batch.embd_rows.empty() && batch.embd_rows[i] != nullptr) {
      std::copy_n(batch.embd_rows[i], E, row);
    } else {
      const int32_t id = batch.tokens[i];
      TESSERA_CHECK(id >= 0 && id < V, kInvalidArgument, "token id {} out of range (vocabulary {})", id, V);
      kernels::dequantize_row(tok_embd_.type, tok_embd_.data + static_cast<size_t>(id) * tok_embd_.row_bytes, row, E);
    }
    // Hugging Face scales the input embeddings, not the table (Gemma's
    // `hidden_states = inputs_embeds * normalizer`), and prompt tuning passes
    // its soft prompt as inputs_embeds: soft-prompt rows are scaled too, so a
    // soft prompt made of table rows equals those tokens.
    if (embd_scale_ != 1.0f) {
      for (int64_t j = 0; j < E; ++j) row[j] *= embd_scale_;
    }
  }
  if (s.tap) s.tap("embd", -1, s.x.data(), T, E, E);
  // RoPE angles depend on the position only: once per token, not per layer.
  const int64_t half = cfg_.n_rot / 2;
  s.rope_cos.ensure(t * static_cast<size_t>(half));
  s.rope_sin.ensure(t * static_cast<size_t>(half));
  TESSERA_CHECK(batch.long_rope.empty() || batch.long_rope.size() == batch.seqs.size(), kInvalidArgument,
                "long_rope names {} sequences of {}", batch.long_rope.size(), batch.seqs.size());
  for (size_t q = 0; q < batch.seqs.size(); ++q) {
    const kernels::AttentionSeq& seq = batch.seqs[q];
    const bool long_regime = batch.long_rope.empty() ? seq.kv_len > long_rope_after_ : batch.long_rope[q] != 0;
    const kernels::RopeParams& rp = rope_for(long_regime);
    for (int64_t i = seq.q_begin; i < seq.q_begin + seq.q_len; ++i) {
      kernels::rope_angles(batch.positions[i], rp, s.rope_cos.data() + i * half, s.rope_sin.data() + i * half);
    }
  }
  if (cfg_.swa_window > 0) {
    s.rope_cos_swa.ensure(t * static_cast<size_t>(half));
    s.rope_sin_swa.ensure(t * static_cast<size_t>(half));
    for (int64_t i = 0; i < T; ++i) {
      kernels::rope_angles(batch.positions[i], rope_swa_, s.rope_cos_swa.data() + i * half,
                           s.rope_sin_swa.data() + i * half);
    }
  }
  TESSERA_CHECK(batch.skip_layers.empty() || static_cast<int64_t>(batch.skip_layers.size()) == cfg_.n_layer,
                kInvalidArgument, "skip_layers names {} layers of {}", batch.skip_layers.size(), cfg_.n_layer);
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    if (batch.skip_layers.empty() || !batch.skip_layers[static_cast<size_t>(il)]) layer(layers_[il], il, batch, kv, s);
  }
  // Final norm and logits only for the rows that are sampled.
  for (int64_t r = 0; r < R; ++r) {
    const int32_t row = batch.logit_rows[r];
    TESSERA_ASSERT(row >= 0 && row < T);
    kernels::rmsnorm(s.x.data() + static_cast<int64_t>(row) * E, out_norm_.data(), s.xb.data() + r * E, E,
                     cfg_.rms_eps, s.ctx.isa);
  }
  if (s.tap) s.tap("result_norm", -1, s.xb.data(), R, E, E);
  if (split_.split()) return split_logits(R, s);
  kernels::matmul(output_, s.xb.data(), E, R, s.logits.data(), V, s.ctx);
  softcap_logits(s.logits.data(), R * V);
}

void DecoderModel::softcap_logits(float* z, int64_t n) const {
  if (cfg_.final_softcap <= 0.0f) return;
  const float cap = cfg_.final_softcap;
  for (int64_t i = 0; i < n; ++i) z[i] = cap * std::tanh(z[i] / cap);
}

void DecoderModel::split_logits(int64_t R, ForwardState& s) const {
  // This rank's vocabulary slice of each row (padded to vocab_part_), then
  // every rank's slices, rank by rank, to rank 0, which lays them out by row.
  const int64_t V = cfg_.n_vocab, P = vocab_part_, mine = output_.view.rows, n = split_.size;
  s.logits_part.ensure(static_cast<size_t>(R * P));
  std::fill_n(s.logits_part.data(), R * P, 0.0f);
  kernels::matmul(output_, s.xb.data(), cfg_.n_embd, R, s.logits_part.data(), P, s.ctx);
  for (int64_t r = 0; r < R; ++r) softcap_logits(s.logits_part.data() + r * P, mine);
  const bool root = split_.rank == 0;
  if (root) s.logits_gathered.ensure(static_cast<size_t>(n * R * P));
  split_.group->gather({s.logits_part.data(), static_cast<size_t>(R * P)},
                       {root ? s.logits_gathered.data() : nullptr, root ? static_cast<size_t>(n * R * P) : 0}, 0);
  if (!root) return;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t first = std::min(V, k * P), count = std::min(V - first, P);
    for (int64_t r = 0; r < R; ++r) {
      std::copy_n(s.logits_gathered.data() + (k * R + r) * P, count, s.logits.data() + r * V + first);
    }
  }
}

}  // namespace tessera
