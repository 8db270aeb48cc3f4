// The interface between attention.cc (work split, checks) and the per-ISA
// attention kernels (attention_ref.cc, attention_avx2.cc, attention_avx512.cc).
// Plain data and function pointers only (see docs/KERNELS.md, "ODR rule").
#pragma once

#include <cstddef>
#include <cmath>
#include <cstdint>

namespace tessera::kernels {

// KV element storage: 0 = f32, 1 = f16, 2 = bf16; 3 = q8_0, 4 = q4_0 (blocks
// of int8 / 4-bit codes with fp16 scales, kernels/kv_codec.h).
enum class KvElem : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8_0 = 3, kQ4_0 = 4 };

// One work unit: query tokens [q0, q0 + nq) of one sequence against one KV
// head, i.e. rows (g, i) for g < group query heads and i < nq tokens.
struct AttnUnitArgs {
  const uint8_t* k = nullptr;  // layer base of K
  const uint8_t* v = nullptr;  // layer base of V
  size_t block_bytes = 0;      // one block, all heads
  size_t head_bytes = 0;       // one (block, head) tile
  const int32_t* block_table = nullptr;
  KvElem elem = KvElem::kF32;
  int32_t block_size = 0;
  int32_t head_dim = 0;
  int32_t kv_head = 0;
  int32_t group = 1;      // query heads per KV head
  int32_t nq = 0;         // query tokens in the unit
  int32_t first_pos = 0;  // position of the unit's first query token
  // Bounded caches (AttentionSeq::key_pos): the position of the key in each
  // of the sequence's n_keys slots, -1 for an empty one; nullptr: slot j
  // holds position j and the keys end at the last query.
  const int32_t* key_pos = nullptr;
  int32_t n_keys = 0;
  const float* q = nullptr;  // row of the unit's first token; head h at q + h * head_dim
  int64_t q_stride = 0;
  float* out = nullptr;      // same layout as q
  int64_t out_stride = 0;
  float scale = 1.0f;
  int32_t window = 0;        // > 0: row at position p sees keys (p - window, p] only
  float softcap = 0.0f;      // > 0: scores become softcap * tanh(score / softcap) (see softcap_score)
  const float* sinks = nullptr;  // [n_heads] (AttentionShape::sinks), or nullptr; see add_sink
  float* scratch = nullptr;  // attention_scratch_floats() floats
  // Attention mass capture (AttentionSeq::key_mass), nullptr when not
  // wanted. For row r and each block b it reads: the softmax weights of the
  // block's slots relative to the running max at that block,
  // exp(score - block_max), 0 for a slot the row does not see, at
  // key_scores[r * scores_ld + b * block_size + j]; that max at
  // block_max[r * (scores_ld / block_size) + b] (left at -inf by the caller
  // for a block the row saw nothing of); and the row's final max and sum at
  // row_stats[2 r], row_stats[2 r + 1]. A slot's weight is then
  // key_scores * exp(block_max - max) / sum: one exp per block, not per key.
  float* key_scores = nullptr;
  int32_t scores_ld = 0;
  float* block_max = nullptr;
  float* row_stats = nullptr;
};

// The first key a query at `pos` attends to (static: included by the
// per-ISA files, see docs/KERNELS.md "ODR rule").
static inline int32_t first_key(int32_t pos, int32_t window) { return window > 0 && pos >= window ? pos - window + 1 : 0; }

// Whether a key at position kp is seen by a query at pos (key_pos path).
static inline bool key_visible(int32_t kp, int32_t pos, int32_t window) {
  return kp >= 0 && kp <= pos && kp >= first_key(pos, window);
}

// cap * tanh(s / cap), written as cap - 2 cap / (exp(2 s / cap) + 1): the
// form every kernel computes (the vector ones with their own exp).
static inline float softcap_score(float s, float cap) { return cap - 2.0f * cap / (std::exp(2.0f * s / cap) + 1.0f); }

// Folds a row's attention sink (a logit with no value) into its running max
// m and sum l once every key is in; returns the factor the row's weighted sum
// of V is multiplied by (the sum was relative to the old max). Every kernel
// calls this, with std::exp, so the sink adds the same bits everywhere.
static inline float add_sink(float sink, float& m, float& l) {
  const float m_new = m > sink ? m : sink;
  const float f = m == -INFINITY ? 0.0f : std::exp(m - m_new);
  l = l * f + std::exp(sink - m_new);
  m = m_new;
  return f;
}

// The sink of query row r of a unit (head kv_head * group + r / nq).
static inline float row_sink(const AttnUnitArgs& a, int r) { return a.sinks[a.kv_head * a.group + r / a.nq]; }

using AttendFn = void (*)(const AttnUnitArgs& a);

// n floats converted to KV elements at dst (contiguous), rounded as
// core/fp16.h rounds (nearest even; a NaN stays a quiet NaN with its top
// payload bits): every ISA writes the same bytes.
using ToKvFn = void (*)(KvElem e, const float* src, int32_t n, uint8_t* dst);

struct AttentionKernels {
  const char* name;
  AttendFn attend;
  ToKvFn to_kv;
};

// Max query tokens per unit.
constexpr int32_t kAttnQueryTile = 32;

// Floats of scratch one worker needs.
inline size_t attention_scratch_floats(int32_t block_size, int32_t head_dim, int32_t group) {
  const size_t rows = static_cast<size_t>(group) * kAttnQueryTile;
  const size_t bs_pad = (static_cast<size_t>(block_size) + 15) / 16 * 16;
  return 2 * bs_pad * head_dim   // K and V tile in f32
         + rows * bs_pad         // scores
         + rows * head_dim       // output accumulators
         + 3 * rows + 64;        // running max and sum, sink factor, alignment slack
}

const AttentionKernels& attention_kernels_ref();
const AttentionKernels& attention_kernels_avx2();
const AttentionKernels& attention_kernels_avx512();

}  // namespace tessera::kernels
