// Paged attention: argument checks, the work split, KV stores, and the naive
// reference. The tiled kernels live in attention_ref.cc / attention_<isa>.cc.
#include "kernels/attention.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/attention_kernels.h"
#include "kernels/kv_codec.h"
#include "kernels/rotation.h"

namespace tessera::kernels {
namespace {

KvElem elem_of(DType t) {
  switch (t) {
    case DType::kF32: return KvElem::kF32;
    case DType::kF16: return KvElem::kF16;
    case DType::kQ8_0: return KvElem::kQ8_0;
    case DType::kQ4_0: return KvElem::kQ4_0;
    default: return KvElem::kBF16;
  }
}

size_t float_elem_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }

void store_elem(DType t, uint8_t* base, size_t index, float v) {
  switch (t) {
    case DType::kF32: reinterpret_cast<float*>(base)[index] = v; return;
    case DType::kF16: reinterpret_cast<fp16_t*>(base)[index] = f32_to_fp16(v); return;
    default: reinterpret_cast<bf16_t*>(base)[index] = f32_to_bf16(v); return;
  }
}

float load_elem(DType t, const uint8_t* base, size_t index) {
  switch (t) {
    case DType::kF32: return reinterpret_cast<const float*>(base)[index];
    case DType::kF16: return fp16_to_f32(reinterpret_cast<const fp16_t*>(base)[index]);
    default: return bf16_to_f32(reinterpret_cast<const bf16_t*>(base)[index]);
  }
}

// Feature d of key j of a K tile, or of row j of a V tile, as f32.
float tile_value(const KvLayerView& kv, bool is_k, const uint8_t* tile, int32_t d, int32_t j) {
  const KvElem e = elem_of(kv.type);
  if (kv_quantized(e)) return kv_value(e, is_k, tile, kv.block_size, kv.head_dim, d, j);
  return load_elem(kv.type, tile, is_k ? static_cast<size_t>(d) * kv.block_size + j : static_cast<size_t>(j) * kv.head_dim + d);
}

const AttentionKernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return attention_kernels_avx512();
    case Isa::kAvx2: return attention_kernels_avx2();
    case Isa::kScalar: break;
  }
  return attention_kernels_ref();
}

struct WorkUnit {
  int32_t seq;
  int32_t kv_head;
  int32_t q0;
  int32_t nq;
};

size_t head_bytes(const KvLayerView& kv) { return kv.tile_bytes(); }

// Row stride of a unit's captured scores: every slot of every block read.
int32_t scores_ld(const AttentionSeq& s, int32_t block_size) {
  return (s.kv_len + block_size - 1) / block_size * block_size;
}

// The softmax weight each slot received from the unit's rows, from what the
// kernel captured (AttnUnitArgs::key_scores): mass[j] = sum over rows of
// weight * exp(block max - row max) / row sum, each term in fixed point
// (kMassOne). mass: [n_keys of the unit].
void unit_mass(const AttnUnitArgs& a, int64_t* mass) {
  const int32_t bs = a.block_size, n_blocks = a.scores_ld / bs;
  std::fill(mass, mass + a.n_keys, int64_t{0});
  for (int32_t r = 0; r < a.group * a.nq; ++r) {
    const float mx = a.row_stats[2 * r], sum = a.row_stats[2 * r + 1];
    if (!(sum > 0.0f)) continue;  // the row saw no key
    const float* w = a.key_scores + static_cast<size_t>(r) * a.scores_ld;
    const float* bm = a.block_max + static_cast<size_t>(r) * n_blocks;
    static const int maxd = getenv("MAXD") ? atoi(getenv("MAXD")) : 1 << 30;
    const int32_t rpos = a.first_pos + r % a.nq;
    for (int32_t b = 0; b < n_blocks; ++b) {
      if (bm[b] == -INFINITY) continue;  // the row saw nothing of it (or never read it)
      const double f = std::exp(static_cast<double>(bm[b]) - mx) / sum * static_cast<double>(kMassOne);
      for (int32_t j = b * bs; j < std::min((b + 1) * bs, a.n_keys); ++j) {
        const int32_t kp = a.key_pos ? a.key_pos[j] : j;
        if (rpos - kp >= maxd) continue;
        if (w[j] != 0.0f) mass[j] += std::llround(w[j] * f);
      }
    }
  }
}

}  // namespace

size_t kv_tile_bytes(DType type, int32_t block_size, int32_t head_dim) {
  return kv_tile_bytes_of(elem_of(type), block_size, head_dim);
}

bool kv_type_supported(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16 || type == DType::kQ8_0 ||
         type == DType::kQ4_0;
}

namespace {

int32_t hadamard_run(int32_t head_dim) { return head_dim & -head_dim; }

// D's signs: a fixed hash of the feature index (the same in every run, so
// cache blocks written to a --kv-store read back in another process).
float hadamard_sign(int32_t i) {
  return (static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull) >> 63 ? -1.0f : 1.0f;
}

}  // namespace

void kv_hadamard_rotate(float* x, int32_t head_dim) {
  const int32_t p = hadamard_run(head_dim);
  const float norm = 1.0f / std::sqrt(static_cast<float>(p));
  for (int32_t i = 0; i < head_dim; ++i) x[i] *= hadamard_sign(i);
  for (int32_t r = 0; r < head_dim; r += p) fwht(x + r, p);
  for (int32_t i = 0; i < head_dim; ++i) x[i] *= norm;
}

void kv_hadamard_rotate_inverse(float* x, int32_t head_dim) {
  const int32_t p = hadamard_run(head_dim);
  const float norm = 1.0f / std::sqrt(static_cast<float>(p));
  for (int32_t r = 0; r < head_dim; r += p) fwht(x + r, p);
  for (int32_t i = 0; i < head_dim; ++i) x[i] *= norm * hadamard_sign(i);
}

namespace {

// x += sign * c, c the shift of kv head h.
void add_key_mean(const KvLayerView& kv, int32_t h, float* x, float sign = 1.0f) {
  const float* c = kv.k_mean + static_cast<int64_t>(h) * kv.head_dim;
  for (int32_t d = 0; d < kv.head_dim; ++d) x[d] += sign * c[d];
}

}  // namespace

void check_kv_layout(DType type, int32_t block_size, int32_t head_dim, bool hadamard) {
  TESSERA_CHECK(kv_type_supported(type), kInvalidArgument, "KV cache type {} is not supported (f32, f16, bf16, q8_0, q4_0)",
                dtype_name(type));
  TESSERA_CHECK(block_size > 0 && head_dim > 0, kInvalidArgument, "KV cache: block size {} and head dim {} must be positive",
                block_size, head_dim);
  TESSERA_CHECK(!hadamard || kv_quantized(elem_of(type)), kInvalidArgument,
                "a Hadamard-rotated KV cache must be q8_0 or q4_0 (not {})", dtype_name(type));
  if (!kv_quantized(elem_of(type))) return;
  TESSERA_CHECK(block_size % 2 == 0 && block_size <= kMaxKvQuantBlockSize, kInvalidArgument,
                "a {} KV cache needs an even block size of at most {} (got {})", dtype_name(type),
                kMaxKvQuantBlockSize, block_size);
  TESSERA_CHECK(head_dim % 2 == 0 && head_dim <= kMaxKvQuantHead, kInvalidArgument,
                "a {} KV cache needs an even head dim of at most {} (got {})", dtype_name(type), kMaxKvQuantHead,
                head_dim);
}

namespace {

// One token's K and V rows of one kv head into its slot: V's row is
// contiguous in the tile, K's a column (stride block_size), so K goes
// through a small buffer.
void store_head(ToKvFn to_kv, const KvLayerView& kv, const float* kr, const float* vr, int64_t slot, int32_t h) {
  const int32_t bs = kv.block_size, hd = kv.head_dim;
  const int64_t block = slot / bs;
  const int32_t off = static_cast<int32_t>(slot % bs);
  uint8_t* kb = kv.k + static_cast<size_t>(block) * kv.block_bytes() + h * head_bytes(kv);
  uint8_t* vb = kv.v + static_cast<size_t>(block) * kv.block_bytes() + h * head_bytes(kv);
  const KvElem e = elem_of(kv.type);
  if (kv_quantized(e)) {  // the same scalar code on every ISA (kv_codec.h)
    float rk[kMaxKvQuantHead], rv[kMaxKvQuantHead];
    if (kv.k_mean != nullptr) {
      const float* c = kv.k_mean + static_cast<int64_t>(h) * hd;
      for (int32_t d = 0; d < hd; ++d) rk[d] = kr[d] - c[d];
      kr = rk;
    }
    if (kv.hadamard) {  // stored rotated
      if (kr != rk) std::copy(kr, kr + hd, rk);
      std::copy(vr, vr + hd, rv);
      kv_hadamard_rotate(rk, hd);
      kv_hadamard_rotate(rv, hd);
      kr = rk;
      vr = rv;
    }
    kv_store_token(e, true, kr, bs, hd, off, kb);
    kv_store_token(e, false, vr, bs, hd, off, vb);
    return;
  }
  const size_t eb = float_elem_bytes(kv.type);
  to_kv(e, vr, hd, vb + static_cast<size_t>(off) * hd * eb);  // V: [block_size][head_dim]
  constexpr int32_t kChunk = 128;
  alignas(64) uint8_t buf[kChunk * 4];
  for (int32_t d0 = 0; d0 < hd; d0 += kChunk) {
    const int32_t n = std::min(kChunk, hd - d0);
    to_kv(e, kr + d0, n, buf);
    for (int32_t d = 0; d < n; ++d) {  // K: [head_dim][block_size]
      std::memcpy(kb + (static_cast<size_t>(d0 + d) * bs + off) * eb, buf + static_cast<size_t>(d) * eb, eb);
    }
  }
}

// Every kv head of n_tokens rows; heads [h0, h1) only.
void store_heads(ToKvFn to_kv, const KvLayerView& kv, const float* k, const float* v, int64_t stride,
                 const int64_t* slots, int64_t n_tokens, int32_t h0, int32_t h1) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int32_t h = h0; h < h1; ++h) {
      const int64_t col = static_cast<int64_t>(h) * kv.head_dim;
      store_head(to_kv, kv, k + t * stride + col, v + t * stride + col, slots[t], h);
    }
  }
}

}  // namespace

void store_kv(const KvLayerView& kv, const float* k, const float* v, int64_t stride, const int64_t* slots,
              int64_t n_tokens, Isa isa) {
  store_heads(kernels_for(isa).to_kv, kv, k, v, stride, slots, n_tokens, 0, kv.n_kv_heads);
}

void gather_kv(const KvLayerView& kv, const int64_t* slots, int64_t n_tokens, float* k, float* v, int64_t stride) {
  const int32_t bs = kv.block_size, hd = kv.head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t block = slots[t] / bs;
    const int32_t off = static_cast<int32_t>(slots[t] % bs);
    for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
      const uint8_t* kb = kv.k + static_cast<size_t>(block) * kv.block_bytes() + h * head_bytes(kv);
      const uint8_t* vb = kv.v + static_cast<size_t>(block) * kv.block_bytes() + h * head_bytes(kv);
      float* kr = k + t * stride + static_cast<int64_t>(h) * hd;
      float* vr = v + t * stride + static_cast<int64_t>(h) * hd;
      for (int32_t d = 0; d < hd; ++d) {
        kr[d] = tile_value(kv, true, kb, d, off);
        vr[d] = tile_value(kv, false, vb, d, off);
      }
      if (kv.hadamard) {
        kv_hadamard_rotate_inverse(kr, hd);
        kv_hadamard_rotate_inverse(vr, hd);
      }
      if (kv.k_mean != nullptr) add_key_mean(kv, h, kr);
    }
  }
}

namespace {

// A quantized key is read whole, rotated in f32 and quantized again (its
// blocks' scales follow the new values).
void rotate_quantized_key(const KvLayerView& kv, int32_t h, uint8_t* kb, int32_t off, const float* c, const float* sn,
                          int64_t half, bool neox) {
  float x[kMaxKvQuantHead];
  const int32_t hd = kv.head_dim;
  for (int32_t d = 0; d < hd; ++d) x[d] = tile_value(kv, true, kb, d, off);
  if (kv.hadamard) kv_hadamard_rotate_inverse(x, hd);
  if (kv.k_mean != nullptr) add_key_mean(kv, h, x);
  for (int64_t i = 0; i < half; ++i) {
    const size_t a = neox ? static_cast<size_t>(i) : 2 * static_cast<size_t>(i);
    const size_t b = neox ? static_cast<size_t>(i + half) : 2 * static_cast<size_t>(i) + 1;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c[i] - x1 * sn[i];
    x[b] = x0 * sn[i] + x1 * c[i];
  }
  if (kv.k_mean != nullptr) add_key_mean(kv, h, x, -1.0f);
  if (kv.hadamard) kv_hadamard_rotate(x, hd);
  kv_store_token(elem_of(kv.type), true, x, kv.block_size, hd, off, kb);
}

}  // namespace

void rotate_keys(const KvLayerView& kv, const int64_t* slots, int64_t n, const float* cos, const float* sin,
                 int64_t half, bool neox) {
  const int32_t bs = kv.block_size;
  TESSERA_CHECK(2 * half <= kv.head_dim, kInvalidArgument, "rotate_keys: {} rotary pairs in a head of {}", half,
                kv.head_dim);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t block = slots[t] / bs;
    const size_t off = static_cast<size_t>(slots[t] % bs);
    const float* c = cos + t * half;
    const float* sn = sin + t * half;
    for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
      uint8_t* kb = kv.k + static_cast<size_t>(block) * kv.block_bytes() + h * head_bytes(kv);
      if (kv_quantized(elem_of(kv.type))) {
        rotate_quantized_key(kv, h, kb, static_cast<int32_t>(off), c, sn, half, neox);
        continue;
      }
      for (int64_t i = 0; i < half; ++i) {
        // K is feature-major: feature d of this key at d * bs + off.
        const size_t a = (neox ? static_cast<size_t>(i) : 2 * static_cast<size_t>(i)) * bs + off;
        const size_t b = (neox ? static_cast<size_t>(i + half) : 2 * static_cast<size_t>(i) + 1) * bs + off;
        const float x0 = load_elem(kv.type, kb, a), x1 = load_elem(kv.type, kb, b);
        store_elem(kv.type, kb, a, x0 * c[i] - x1 * sn[i]);
        store_elem(kv.type, kb, b, x0 * sn[i] + x1 * c[i]);
      }
    }
  }
}

void copy_block(const KvLayerView& kv, int32_t src, int32_t dst) {
  const size_t bb = kv.block_bytes();
  std::memcpy(kv.k + static_cast<size_t>(dst) * bb, kv.k + static_cast<size_t>(src) * bb, bb);
  std::memcpy(kv.v + static_cast<size_t>(dst) * bb, kv.v + static_cast<size_t>(src) * bb, bb);
}

namespace {

void check_shape(const KvLayerView& kv, const AttentionShape& shape) {
  TESSERA_CHECK(shape.n_heads % kv.n_kv_heads == 0, kInvalidArgument,
                "attention: {} query heads not a multiple of {} kv heads", shape.n_heads, kv.n_kv_heads);
  TESSERA_CHECK(shape.window >= 0, kInvalidArgument, "attention: sliding window {} is negative", shape.window);
  TESSERA_CHECK(shape.softcap >= 0.0f, kInvalidArgument, "attention: soft-cap {} is negative", shape.softcap);
}

// The new rows can be written by the units that read them only when each
// (sequence, kv head) is one unit and the sequences cover the new tokens
// exactly (decode, short chunks); otherwise they are written first.
bool store_in_units(std::span<const AttentionSeq> seqs, const NewKv* fresh) {
  if (fresh == nullptr) return false;
  int64_t covered = 0;
  for (const AttentionSeq& s : seqs) {
    if (s.q_len > kAttnQueryTile || s.q_begin != covered) return false;
    covered += s.q_len;
  }
  return covered == fresh->n_tokens;
}

// One unit per (sequence, kv head, tile of query rows).
std::vector<WorkUnit> make_units(std::span<const AttentionSeq> seqs, int32_t n_kv_heads) {
  std::vector<WorkUnit> units;
  for (int32_t si = 0; si < static_cast<int32_t>(seqs.size()); ++si) {
    const AttentionSeq& s = seqs[si];
    TESSERA_ASSERT(s.q_len <= s.kv_len);
    for (int32_t q0 = 0; q0 < s.q_len; q0 += kAttnQueryTile) {
      for (int32_t h = 0; h < n_kv_heads; ++h) units.push_back({si, h, q0, std::min(kAttnQueryTile, s.q_len - q0)});
    }
  }
  return units;
}

// Multiply-adds: q.K and p.V per query row, head and key.
int64_t attention_macs(std::span<const AttentionSeq> seqs, const AttentionShape& shape, int32_t head_dim) {
  int64_t work = 0;
  for (const AttentionSeq& s : seqs) work += int64_t{s.q_len} * shape.n_heads * s.kv_len * 2 * head_dim;
  return work;
}

// Attention mass capture (H2O / SpAtten): each unit of a sequence that wants
// it gets a region of ctx.ws->attn_mass (its rows' raw scores, their softmax
// max and sum) and one of attn_mass_sum (the unit's fixed-point mass per
// slot, computed after its pass); the units' masses are added to key_mass
// after the dispatch.
struct MassLayout {
  std::vector<size_t> mass_at, sum_at;  // per unit; mass_at SIZE_MAX: no capture
};

MassLayout plan_mass(const std::vector<WorkUnit>& units, std::span<const AttentionSeq> seqs, int32_t group,
                     int32_t block_size, const KernelContext& ctx) {
  MassLayout m{std::vector<size_t>(units.size(), SIZE_MAX), std::vector<size_t>(units.size(), 0)};
  size_t mass_floats = 0, mass_sums = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    const AttentionSeq& s = seqs[units[i].seq];
    if (s.key_mass == nullptr) continue;
    m.mass_at[i] = mass_floats;
    m.sum_at[i] = mass_sums;
    const size_t rows = static_cast<size_t>(group) * units[i].nq;
    const size_t ld = static_cast<size_t>(scores_ld(s, block_size));
    mass_floats += rows * ld + rows * (ld / block_size) + 2 * rows;
    mass_sums += static_cast<size_t>(s.kv_len);
  }
  if (mass_floats > 0) {
    ctx.ws->attn_mass.ensure(mass_floats);
    ctx.ws->attn_mass_sum.ensure(mass_sums);
  }
  return m;
}

// The new rows, written before any unit reads them, by kv head across the threads.
void store_fresh(const AttentionKernels& kern, const KvLayerView& kv, const NewKv& fresh, ThreadPool* pool) {
  const auto store = [&](int32_t h0, int32_t h1) {
    store_heads(kern.to_kv, kv, fresh.k, fresh.v, fresh.stride, fresh.slots, fresh.n_tokens, h0, h1);
  };
  if (pool == nullptr || kv.n_kv_heads == 1) {
    store(0, kv.n_kv_heads);
    return;
  }
  std::atomic<int32_t> next_head{0};
  pool->run_dynamic([&](int, int) {
    for (int32_t h = next_head.fetch_add(1); h < kv.n_kv_heads; h = next_head.fetch_add(1)) store(h, h + 1);
  });
}

// What every unit of this call shares.
AttnUnitArgs shared_unit_args(const KvLayerView& kv, const AttentionShape& shape, int32_t group, int64_t q_stride,
                              int64_t out_stride) {
  AttnUnitArgs a;
  a.k = kv.k;
  a.v = kv.v;
  a.block_bytes = kv.block_bytes();
  a.head_bytes = head_bytes(kv);
  a.elem = elem_of(kv.type);
  a.block_size = kv.block_size;
  a.head_dim = kv.head_dim;
  a.group = group;
  a.q_stride = q_stride;
  a.out_stride = out_stride;
  a.scale = shape.scale;
  a.window = shape.window;
  a.softcap = shape.softcap;
  a.sinks = shape.sinks;
  return a;
}

// This unit is the only reader of its sequence's new rows in this step, and
// the rows reach the cache of the core that reads them next.
void store_unit_rows(const AttentionKernels& kern, const KvLayerView& kv, const NewKv& fresh, const AttentionSeq& s,
                     int32_t kv_head) {
  const int64_t col = static_cast<int64_t>(kv_head) * kv.head_dim;
  for (int32_t i = 0; i < s.q_len; ++i) {
    const int64_t t = s.q_begin + i;
    store_head(kern.to_kv, kv, fresh.k + t * fresh.stride + col, fresh.v + t * fresh.stride + col, fresh.slots[t],
               kv_head);
  }
}

// Points a unit's score capture at its region of the workspace.
void capture_regions(AttnUnitArgs& a, const AttentionSeq& s, size_t rows, int32_t block_size, float* region) {
  a.scores_ld = scores_ld(s, block_size);
  a.key_scores = region;
  a.block_max = a.key_scores + rows * a.scores_ld;
  std::fill(a.block_max, a.block_max + rows * (a.scores_ld / block_size), -INFINITY);
  a.row_stats = a.block_max + rows * (a.scores_ld / block_size);
}

}  // namespace

namespace {

// A --kv-hadamard cache holds rotated K and V: the queries are rotated the
// same way (into the workspace) and each output row, a weighted sum of
// rotated V rows, is rotated back afterwards.
const float* rotate_queries(const KvLayerView& kv, const float* q, int64_t& q_stride, std::span<const AttentionSeq> seqs,
                            int32_t n_heads, const KernelContext& ctx) {
  const int64_t width = static_cast<int64_t>(n_heads) * kv.head_dim;
  int64_t rows = 0;
  for (const AttentionSeq& s : seqs) rows = std::max<int64_t>(rows, s.q_begin + s.q_len);
  ctx.ws->attn_q.ensure(static_cast<size_t>(rows * width));
  float* rq = ctx.ws->attn_q.data();
  for (const AttentionSeq& s : seqs) {
    for (int64_t r = s.q_begin; r < s.q_begin + s.q_len; ++r) {
      std::copy(q + r * q_stride, q + r * q_stride + width, rq + r * width);
      for (int32_t h = 0; h < n_heads; ++h) kv_hadamard_rotate(rq + r * width + static_cast<int64_t>(h) * kv.head_dim, kv.head_dim);
    }
  }
  q_stride = width;
  return rq;
}

void rotate_outputs_back(const KvLayerView& kv, float* out, int64_t out_stride, std::span<const AttentionSeq> seqs,
                         int32_t n_heads) {
  for (const AttentionSeq& s : seqs) {
    for (int64_t r = s.q_begin; r < s.q_begin + s.q_len; ++r) {
      for (int32_t h = 0; h < n_heads; ++h) {
        kv_hadamard_rotate_inverse(out + r * out_stride + static_cast<int64_t>(h) * kv.head_dim, kv.head_dim);
      }
    }
  }
}

}  // namespace

void paged_attention(const KvLayerView& kv, const float* q, int64_t q_stride, float* out, int64_t out_stride,
                     std::span<const AttentionSeq> seqs, const AttentionShape& shape, const KernelContext& ctx,
                     const NewKv* fresh) {
  check_shape(kv, shape);
  if (kv.hadamard) q = rotate_queries(kv, q, q_stride, seqs, shape.n_heads, ctx);
  const bool in_units = store_in_units(seqs, fresh);
  const int32_t group = shape.n_heads / kv.n_kv_heads;
  const std::vector<WorkUnit> units = make_units(seqs, kv.n_kv_heads);
  const MassLayout mass = plan_mass(units, seqs, group, kv.block_size, ctx);
  ThreadPool* pool = parallel_pool(ctx, attention_macs(seqs, shape, kv.head_dim), kMinParallelAttentionMacs);
  const AttentionKernels& kern = kernels_for(ctx.isa);
  if (fresh != nullptr && !in_units) store_fresh(kern, kv, *fresh, pool);
  const size_t per_thread = attention_scratch_floats(kv.block_size, kv.head_dim, group);
  ctx.ws->tmp.ensure(per_thread * static_cast<size_t>(pool != nullptr ? pool->size() : 1));
  float* scratch = ctx.ws->tmp.data();
  // Units differ in cost (context lengths differ): hand them out dynamically.
  // Which thread computes a unit does not change its arithmetic.
  std::atomic<size_t> next{0};
  auto job = [&](int tid, int) {
    AttnUnitArgs a = shared_unit_args(kv, shape, group, q_stride, out_stride);
    a.scratch = scratch + per_thread * tid;
    for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < units.size();
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      const WorkUnit& u = units[i];
      const AttentionSeq& s = seqs[u.seq];
      a.block_table = s.block_table;
      a.kv_head = u.kv_head;
      a.nq = u.nq;
      a.first_pos = (s.key_pos != nullptr ? s.q_pos : s.kv_len - s.q_len) + u.q0;
      a.key_pos = s.key_pos;
      a.n_keys = s.kv_len;
      a.q = q + static_cast<int64_t>(s.q_begin + u.q0) * q_stride;
      a.out = out + static_cast<int64_t>(s.q_begin + u.q0) * out_stride;
      if (in_units) store_unit_rows(kern, kv, *fresh, s, u.kv_head);
      if (mass.mass_at[i] == SIZE_MAX) {
        a.key_scores = a.block_max = a.row_stats = nullptr;
        kern.attend(a);
        continue;
      }
      capture_regions(a, s, static_cast<size_t>(group) * u.nq, kv.block_size,
                      ctx.ws->attn_mass.data() + mass.mass_at[i]);
      kern.attend(a);
      unit_mass(a, ctx.ws->attn_mass_sum.data() + mass.sum_at[i]);
    }
  };
  if (pool == nullptr) {
    job(0, 1);
  } else {
    pool->run_dynamic(job);
  }
  for (size_t i = 0; i < units.size(); ++i) {
    if (mass.mass_at[i] == SIZE_MAX) continue;
    const AttentionSeq& s = seqs[units[i].seq];
    const int64_t* m = ctx.ws->attn_mass_sum.data() + mass.sum_at[i];
    for (int32_t j = 0; j < s.kv_len; ++j) s.key_mass[j] += m[j];
  }
  if (kv.hadamard) rotate_outputs_back(kv, out, out_stride, seqs, shape.n_heads);
}

namespace {

// Key (or V row) j of a tile as the model wrote it: a --kv-hadamard cache's
// stored vector rotated back by the dense matrix D H / sqrt(p), H[a][b] =
// (-1)^popcount(a & b) (an independent check of the fast transform).
std::vector<double> naive_head_vector(const KvLayerView& kv, bool is_k, const uint8_t* tile, int32_t j) {
  const int32_t hd = kv.head_dim;
  std::vector<double> y(static_cast<size_t>(hd));
  for (int32_t d = 0; d < hd; ++d) y[d] = tile_value(kv, is_k, tile, d, j);
  if (!kv.hadamard) return y;
  const int32_t p = hadamard_run(hd);
  std::vector<double> x(y.size(), 0.0);
  for (int32_t i = 0; i < hd; ++i) {
    const int32_t run = i - i % p;
    for (int32_t k = run; k < run + p; ++k) x[i] += (std::popcount(static_cast<uint32_t>((i % p) & (k % p))) % 2 ? -1.0 : 1.0) * y[k];
    x[i] *= hadamard_sign(i) / std::sqrt(static_cast<double>(p));
  }
  return x;
}

}  // namespace

void paged_attention_naive(const KvLayerView& kv, const float* q, int64_t q_stride, float* out, int64_t out_stride,
                           std::span<const AttentionSeq> seqs, const AttentionShape& shape) {
  const int32_t group = shape.n_heads / kv.n_kv_heads;
  const int32_t bs = kv.block_size, hd = kv.head_dim;
  std::vector<double> scores;
  // Each (kv head, slot)'s K and V vectors, read once per sequence.
  std::vector<std::vector<double>> keys, values;
  auto head_vectors = [&](const AttentionSeq& s, int32_t kh, int32_t j) -> std::pair<const double*, const double*> {
    const size_t at = static_cast<size_t>(kh) * s.kv_len + j;
    if (keys[at].empty()) {
      const size_t tile = static_cast<size_t>(s.block_table[j / bs]) * kv.block_bytes() + kh * head_bytes(kv);
      keys[at] = naive_head_vector(kv, true, kv.k + tile, j % bs);
      values[at] = naive_head_vector(kv, false, kv.v + tile, j % bs);
    }
    return {keys[at].data(), values[at].data()};
  };
  std::vector<double> o(static_cast<size_t>(hd));
  for (const AttentionSeq& s : seqs) {
    keys.assign(static_cast<size_t>(kv.n_kv_heads) * s.kv_len, {});
    values.assign(keys.size(), {});
    for (int32_t i = 0; i < s.q_len; ++i) {
      const int32_t pos = (s.key_pos != nullptr ? s.q_pos : s.kv_len - s.q_len) + i;
      // Slot j of the table holds the key at position key_of(j) (-1: none).
      const int32_t n_slots = s.key_pos != nullptr ? s.kv_len : pos + 1;
      auto key_of = [&](int32_t j) { return s.key_pos != nullptr ? s.key_pos[j] : j; };
      for (int32_t h = 0; h < shape.n_heads; ++h) {
        const int32_t kh = h / group;
        const float* qr = q + static_cast<int64_t>(s.q_begin + i) * q_stride + static_cast<int64_t>(h) * hd;
        // Dense scores over [0, pos]; keys before the sliding window are
        // masked to -inf, so they get weight exp(-inf) = 0.
        const int32_t lo = shape.window > 0 ? pos - shape.window + 1 : 0;
        auto seen = [&](int32_t j) { return key_of(j) >= std::max(lo, 0) && key_of(j) <= pos; };
        scores.assign(static_cast<size_t>(n_slots), -INFINITY);
        double mx = -INFINITY;
        for (int32_t j = 0; j < n_slots; ++j) {
          if (!seen(j)) continue;
          const double* key = head_vectors(s, kh, j).first;
          double dot = 0.0;
          for (int32_t d = 0; d < hd; ++d) dot += static_cast<double>(qr[d]) * key[d];
          scores[j] = dot * shape.scale;
          if (shape.softcap > 0.0f) scores[j] = shape.softcap * std::tanh(scores[j] / shape.softcap);
          mx = std::max(mx, scores[j]);
        }
        const double sink = shape.sinks != nullptr ? shape.sinks[h] : -INFINITY;
        mx = std::max(mx, sink);
        double sum = shape.sinks != nullptr ? std::exp(sink - mx) : 0.0;  // a logit with no value
        for (double& sc : scores) sum += (sc = std::exp(sc - mx));
        std::fill(o.begin(), o.end(), 0.0);
        for (int32_t j = 0; j < n_slots; ++j) {
          if (!seen(j)) continue;
          const double* value = head_vectors(s, kh, j).second;
          for (int32_t d = 0; d < hd; ++d) o[d] += scores[j] * value[d];
        }
        float* orow = out + static_cast<int64_t>(s.q_begin + i) * out_stride + static_cast<int64_t>(h) * hd;
        for (int32_t d = 0; d < hd; ++d) orow[d] = static_cast<float>(o[d] / sum);
        if (s.key_mass != nullptr) {
          for (int32_t j = 0; j < n_slots; ++j) {
            if (seen(j)) s.key_mass[j] += std::llround(scores[j] / sum * static_cast<double>(kMassOne));
          }
        }
      }
    }
  }
}

}  // namespace tessera::kernels
