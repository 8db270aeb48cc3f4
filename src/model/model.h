// The interface every architecture implements, and loading a model file.
//
// A model file (model/arch/llama.cc, ...) describes topology only: which kernels run in
// which order on which weights. Memory for activations lives in
// ForwardState, KV memory in KvCache, and the step's metadata in
// ForwardBatch, all passed in explicitly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/kernel_context.h"
#include "kernels/matmul.h"
#include "kernels/qmoe.h"
#include "format/model_config.h"
#include "kv/forward_batch.h"
#include "format/gguf.h"
#include "model/kv_cache.h"
#include "model/tensor_split.h"

namespace tessera {

// A debug tap: called with named intermediates ("attn_norm", layer 3, ...)
// so tests can compare any of them with a reference. `data` is
// [rows, cols] with row stride `stride` floats.
using ForwardTap = std::function<void(std::string_view name, int64_t layer, const float* data,
                                      int64_t rows, int64_t cols, int64_t stride)>;

// Scratch and outputs of forward(). Buffers grow to the largest batch seen.
struct ForwardState {
  kernels::KernelContext ctx;
  kernels::Workspace ws;
  ForwardTap tap;                  // optional
  AlignedBuffer<float> logits;     // [n_logit_rows, n_vocab] after forward() (rank 0's, under tensor parallelism)
  // Tensor parallelism: this rank's vocabulary slice of the logits, and
  // every rank's gathered on rank 0 (model/tensor_split.h).
  AlignedBuffer<float> logits_part, logits_gathered;
  // ... and every rank's part of a row (an FFN product rotated whole), of
  // each token's max |x| (an int8 product's activation scale).
  AlignedBuffer<float> parts_gathered;
  std::vector<float> amax_part, amax_gathered;
  // ... and the step with this rank's parts of its adapters in place of
  // the whole ones (TensorParallelModel: reused, so a step allocates nothing).
  ForwardBatch own_batch;
  // Activations, [n_tokens, width] each.
  AlignedBuffer<float> x, xb, xb2, q, k, v, att, ff_gate, ff_up;
  AlignedBuffer<float> rope_cos, rope_sin;  // [n_tokens, n_rot / 2]: one step's angles, for every layer
  AlignedBuffer<float> rope_cos_swa, rope_sin_swa;  // the same for the local layers, if their RoPE differs
  // One layer's attention entries when some keys are hidden from it
  // (ForwardBatch::key_depth), and their masked key positions.
  std::vector<kernels::AttentionSeq> layer_seqs;
  std::vector<std::vector<int32_t>> layer_key_pos;
  // Mixture of experts: router probabilities [n_tokens, n_expert], each
  // token's chosen experts and weights [n_tokens, n_expert_used], the
  // step's (token, weight) pairs grouped by expert, and one expert's
  // gathered input rows and outputs.
  AlignedBuffer<float> router, moe_in, moe_out;
  std::vector<int32_t> moe_choice, moe_offsets, moe_tokens;
  std::vector<float> moe_weight, moe_token_weight;
  std::vector<kernels::GroupedMatmul> moe_jobs;  // one dispatch's expert products
  std::vector<kernels::QmoeJob> qmoe_jobs;       // the same for QMoE experts
  // Expert load since the caller last cleared them, [n_layer * n_expert]:
  // tokens routed to each expert, and passes over each expert's weights
  // (one per step in which it has tokens: each selected expert's weights
  // are read once per step, whatever the number of its tokens).
  std::vector<int64_t> expert_tokens, expert_passes;
  // Contextual sparsity (model/ffn_sparsity.h): the step's kept neurons
  // [n_tokens, n_ff], their union, and the gathered up rows [n_tokens,
  // union]. Counters since the caller last cleared them, summed over the
  // layers of every step: neurons considered (tokens x n_ff), kept, and in
  // the steps' unions (rows of up and down read).
  std::vector<uint8_t> ffn_keep;
  std::vector<int32_t> ffn_union;
  AlignedBuffer<float> ffn_up_rows;
  int64_t ffn_neurons = 0, ffn_kept = 0, ffn_union_rows = 0, ffn_layer_steps = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // The model's whole shape, what its files (adapters included) hold: a
  // tensor-parallel shard's config() has its share of the heads and neurons.
  virtual ModelConfig whole_config() const { return config(); }

  // Runs one step: writes the K/V of batch tokens into `kv`, and the logits
  // of batch.logit_rows into state.logits.
  virtual void forward(const ForwardBatch& batch, KvCache& kv, ForwardState& state) const = 0;

  // Bytes of weights one decode step reads (all matrices, one embedding
  // row): the numerator of the decode roofline.
  virtual size_t bytes_per_token() const = 0;

  // Multiply-adds of the weight matrices per token (every layer's
  // matrices), and per logit row (the output matrix): the numerator of the
  // compute roofline of prompt processing. Attention's own work is not in
  // it (it grows with the context; bench reports it separately).
  struct MatmulWork {
    int64_t per_token = 0;
    int64_t per_logit_row = 0;
  };
  virtual MatmulWork matmul_work() const = 0;

  // > 0: the model has two RoPE regimes (Phi-3's LongRoPE): a sequence longer
  // than this many tokens turns every position with the long factors, a
  // shorter one with the short factors (ForwardBatch::long_rope says which
  // per sequence). 0: one regime.
  virtual int64_t long_rope_after() const { return 0; }

  // The constant a quantized KV cache subtracts from each layer's keys
  // ([n_layer][kv_dim]; empty: none), from the file's `tessera.kv.key_mean`
  // (kernels::KvLayerView::k_mean, quant/key_mean.h).
  virtual const std::vector<std::vector<float>>& key_mean() const {
    static const std::vector<std::vector<float>> none;
    return none;
  }
};

// Which sequences of a two-regime model (Model::long_rope_after) run in the
// long regime. kSequence (default; Hugging Face transformers): a sequence
// longer than the original context, all of it; a sequence that grows past it
// is computed again (transformers' generate drops its cache there). kContext
// (llama.cpp): every sequence, when the configured context is longer.
enum class LongRopeMode { kSequence, kContext };

// Whether a sequence of `seq_len` tokens runs in the long regime under `mode`
// with a context of `n_ctx` (false when the model has one regime).
inline bool long_rope_regime(const Model& m, LongRopeMode mode, int64_t seq_len, int64_t n_ctx) {
  const int64_t after = m.long_rope_after();
  if (after <= 0) return false;
  return mode == LongRopeMode::kContext ? n_ctx > after : seq_len > after;
}

class Tokenizer;

// A model file, mapped, with its model built from it. The GGUF mapping (or
// a Hugging Face folder's view, format/hf_model.h) stays alive as long as this
// does (weights are used in place).
struct LoadedModel {
  std::shared_ptr<gguf::File> file;
  std::unique_ptr<Model> model;
  std::string hf_folder;  // the Hugging Face folder it came from; empty for a GGUF
};

// Opens a GGUF file, or a Hugging Face folder, and builds the model its
// architecture names. Throws Error with a precise message for anything
// missing or unsupported. `split`: load this rank's shard of a
// tensor-parallel model (model/tensor_split.h).
LoadedModel load_model(const std::string& path, const TensorSplit& split = {});

// The model's tokenizer: the GGUF's tokenizer.* metadata, or the folder's
// tokenizer.json (with tokenizer_config.json).
std::unique_ptr<Tokenizer> load_tokenizer(const LoadedModel& lm);

// The architectures load_model() knows, by general.architecture name.
bool architecture_supported(std::string_view arch);

}  // namespace tessera
