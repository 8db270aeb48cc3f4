// Attention over a paged KV cache, FlashAttention-style: keys and values are
// read block by block through each sequence's block table, scores are
// reduced with an online softmax (running max and sum, rescaled as new
// blocks arrive), and the full score matrix is never materialised. Memory is
// O(block) per worker whatever the context length.
//
// KV layout, per layer: [num_blocks][n_kv_heads][tile], where a tile is
//   K: [head_dim][block_size]  (feature-major: one vector load holds one
//      feature of consecutive keys, so q.K is a broadcast-FMA per feature
//      with no horizontal sums)
//   V: [block_size][head_dim]  (key-major: the weighted sum of values runs
//      along head_dim)
// One (block, kv head) tile is block_size * head_dim contiguous values,
// loaded once and used by every query head of its GQA group and by every
// query token of the sequence in the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "kernels/kernel_context.h"

namespace tessera::kernels {

// Bytes of one (block, kv head) tile of K (or of V) of a cache of this type:
// block_size * head_dim values, and for Q8_0 / Q4_0 their fp16 scales
// (layout in kernels/kv_codec.h).
size_t kv_tile_bytes(DType type, int32_t block_size, int32_t head_dim);

struct KvLayerView {
  DType type = DType::kF32;  // F32, F16, BF16, Q8_0 or Q4_0
  uint8_t* k = nullptr;      // [num_blocks][n_kv_heads][head_dim][block_size]
  uint8_t* v = nullptr;      // [num_blocks][n_kv_heads][block_size][head_dim]
  int32_t block_size = 16;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  // Q8_0 / Q4_0 only: each token's K and V head vectors are stored rotated
  // by a randomized Hadamard matrix (kv_hadamard_rotate), which spreads
  // outlier features over the whole quantization block. Attention rotates
  // the queries the same way and rotates its output back; store_kv,
  // gather_kv and rotate_keys take and give unrotated values.
  bool hadamard = false;
  // Q8_0 / Q4_0 only, or null: a constant subtracted from every key before
  // it is stored ([n_kv_heads * head_dim]; docs/KV_CACHE.md, "Key centering").
  // q.(k - c) = q.k - q.c, the same for every key of a query, so the
  // softmax is unchanged, while the keys' large constant part (RoPE's
  // low-frequency pairs) no longer sets the 4-bit step. store_kv, gather_kv
  // and rotate_keys take and give unshifted keys. Not for attention with
  // sinks or soft-capping, which are not shift-invariant.
  const float* k_mean = nullptr;

  size_t tile_bytes() const { return kv_tile_bytes(type, block_size, head_dim); }
  size_t block_bytes() const { return tile_bytes() * n_kv_heads; }
};

// F32, F16, BF16, Q8_0 and Q4_0.
bool kv_type_supported(DType type);
// The rotation of a --kv-hadamard cache, in place on one head vector:
// x <- H D x / sqrt(p) on each run of p features, p the largest power of two
// that divides head_dim, D fixed pseudo-random signs, H the Sylvester
// Hadamard matrix (by the fast Walsh-Hadamard transform). Orthogonal, so
// q.k and the weighted sums of V are unchanged; _inverse undoes it.
void kv_hadamard_rotate(float* x, int32_t head_dim);
void kv_hadamard_rotate_inverse(float* x, int32_t head_dim);

// Throws kInvalidArgument when a cache of this type cannot hold heads of
// head_dim in blocks of block_size (the quantized types need an even
// head_dim and block_size, head_dim <= 1024, block_size <= 256).
void check_kv_layout(DType type, int32_t block_size, int32_t head_dim, bool hadamard = false);

// One sequence's share of a step. Its query rows are q[q_begin, q_begin +
// q_len); query i sits at position kv_len - q_len + i and attends causally to
// keys at positions [0, that position] (the last AttentionShape::window of
// them with a sliding window). block_table covers kv_len tokens.
//
// With key_pos (a bounded KV cache, docs/KV_POLICIES.md) slots and
// positions are apart: the table's slots [0, kv_len) hold keys in any order,
// key_pos[j] is the position of the key in slot j (-1: an empty slot), and
// query i sits at position q_pos + i; it attends to every key whose position
// is in [0, its own] (and in its window). Without key_pos (nullptr: dense)
// slot j holds position j, as above.
//
// key_mass (H2O / SpAtten, kv/kv_policy.h): when set, the softmax weight
// each slot's key received in this call, summed over query rows and heads,
// is added to key_mass[slot] (captured in the same pass; [kv_len]), in
// fixed point: each row's weight is rounded to a multiple of 1 / kMassOne
// on its own, so the sums are exact and do not depend on how rows were
// split into steps, units or threads (batch invariance).
struct AttentionSeq {
  int32_t q_begin = 0;
  int32_t q_len = 0;
  int32_t kv_len = 0;
  const int32_t* block_table = nullptr;
  const int32_t* key_pos = nullptr;  // [kv_len] or nullptr
  int32_t q_pos = 0;                 // with key_pos: position of the first query row
  int64_t* key_mass = nullptr;       // [kv_len] or nullptr
};

// The fixed-point unit of AttentionSeq::key_mass: a weight of 1.
inline constexpr int64_t kMassOne = int64_t{1} << 32;

struct AttentionShape {
  int32_t n_heads = 0;     // query heads; a multiple of kv.n_kv_heads (GQA)
  float scale = 1.0f;      // usually 1/sqrt(head_dim)
  // Sliding window (Mistral v0.1): when > 0, a query at position p attends
  // only to keys at positions (p - window, p]. Whole blocks before the window
  // are not read.
  int32_t window = 0;
  // Logit soft-capping (Gemma 2): when > 0, each score s = scale * q.k
  // becomes softcap * tanh(s / softcap) before the softmax. 0 leaves the
  // kernels' arithmetic as it is without it, bit for bit.
  float softcap = 0.0f;
  // Attention sinks (gpt-oss): when not null, one learned logit per query
  // head, [n_heads], that joins each row's softmax with no value: the row's
  // weights are exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink - m)).
  const float* sinks = nullptr;
};

// Writes the K and V rows of n_tokens new tokens into their slots
// (slot = block * block_size + offset). k, v: [n_tokens, stride] f32 with
// n_kv_heads * head_dim values used per row.
void store_kv(const KvLayerView& kv, const float* k, const float* v, int64_t stride,
              const int64_t* slots, int64_t n_tokens, Isa isa);

// The K and V rows of a step's new tokens, as store_kv() takes them.
struct NewKv {
  const float* k = nullptr;       // [n_tokens, stride]
  const float* v = nullptr;       // [n_tokens, stride]
  int64_t stride = 0;
  const int64_t* slots = nullptr;  // [n_tokens]
  int64_t n_tokens = 0;
};

// out[row, h * head_dim + d] = softmax(q_row_h . K^T * scale) V, per
// sequence. q, out: [total query rows, stride] f32, n_heads * head_dim used.
// With `fresh`, the new tokens' K/V are stored first (same result as
// store_kv() then paged_attention()); in decode each worker stores the rows
// of the heads it attends, in the same dispatch, instead of one thread
// touching every head's cache lines before the others start.
void paged_attention(const KvLayerView& kv, const float* q, int64_t q_stride, float* out,
                     int64_t out_stride, std::span<const AttentionSeq> seqs,
                     const AttentionShape& shape, const KernelContext& ctx, const NewKv* fresh = nullptr);

// The inverse of store_kv: reads the K and V rows of n_tokens slots back as
// f32 ([n_tokens, stride], n_kv_heads * head_dim used).
void gather_kv(const KvLayerView& kv, const int64_t* slots, int64_t n_tokens, float* k, float* v, int64_t stride);

// Rotates the keys of n slots by their own angles (RoPE by a position
// difference: keys are stored rotated, and a bounded cache moves kept keys
// to new positions). cos, sin: [n][half] per slot; pairs as RopeParams::neox
// says, the first 2 * half features of each head. V is not touched.
void rotate_keys(const KvLayerView& kv, const int64_t* slots, int64_t n, const float* cos, const float* sin,
                 int64_t half, bool neox);

// Copies K and V of block src to block dst (one layer).
void copy_block(const KvLayerView& kv, int32_t src, int32_t dst);

// The naive reference, for tests and benchmarks: materialises every score
// of a query row, exact softmax in double precision. O(context) memory.
void paged_attention_naive(const KvLayerView& kv, const float* q, int64_t q_stride, float* out,
                           int64_t out_stride, std::span<const AttentionSeq> seqs, const AttentionShape& shape);

}  // namespace tessera::kernels
