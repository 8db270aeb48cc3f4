// Paged attention: work split, KV stores and the scalar tiled kernel.
#include "kernels/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"

namespace tessera::kernels {
namespace {

// Query tokens of one sequence handled together: their scores against one
// key tile are computed while the tile is hot in L1.
constexpr int32_t kQueryTile = 16;

void to_f32(DType type, const uint8_t* src, float* dst, size_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kF16: {
      const auto* h = reinterpret_cast<const fp16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
      return;
    }
    default: {
      const auto* h = reinterpret_cast<const bf16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
  }
}

void from_f32(DType type, const float* src, uint8_t* dst, size_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kF16: {
      auto* h = reinterpret_cast<fp16_t*>(dst);
      for (size_t i = 0; i < n; ++i) h[i] = f32_to_fp16(src[i]);
      return;
    }
    default: {
      auto* h = reinterpret_cast<bf16_t*>(dst);
      for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
  }
}

struct WorkUnit {
  int32_t seq;
  int32_t kv_head;
  int32_t q0;  // first query token (within the sequence) of this tile
  int32_t nq;  // query tokens in the tile
};

// Per-thread scratch, in floats.
size_t scratch_floats(const KvLayerView& kv, int32_t group) {
  const size_t rows = static_cast<size_t>(group) * kQueryTile;
  return 2 * kv.tile_elems()                       // K and V tile in f32
         + rows * kv.block_size                    // scores
         + rows * kv.head_dim                      // accumulators
         + 2 * rows;                               // running max and sum
}

// One (sequence, kv head, query tile): online softmax over the sequence's
// blocks. Each query row's arithmetic depends only on its own sequence.
void attend_unit(const KvLayerView& kv, const float* q, int64_t q_stride, float* out,
                 int64_t out_stride, const AttentionSeq& s, const WorkUnit& u, int32_t group,
                 float scale, float* scratch) {
  const int32_t bs = kv.block_size, hd = kv.head_dim;
  const int32_t rows = group * u.nq;  // row r: head g = r / nq, token i = r % nq
  float* kt = scratch;
  float* vt = kt + kv.tile_elems();
  float* sc = vt + kv.tile_elems();
  float* acc = sc + static_cast<size_t>(group) * kQueryTile * bs;
  float* m = acc + static_cast<size_t>(group) * kQueryTile * hd;
  float* l = m + static_cast<size_t>(group) * kQueryTile;
  std::fill(acc, acc + static_cast<size_t>(rows) * hd, 0.0f);
  std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
  std::fill(l, l + rows, 0.0f);

  const int32_t first_pos = s.kv_len - s.q_len;  // position of query token 0
  const int32_t last_key = first_pos + u.q0 + u.nq - 1;  // keys beyond are masked for all rows
  const int32_t n_blocks = last_key / bs + 1;
  const size_t head_off = static_cast<size_t>(u.kv_head) * kv.tile_elems() * kv.elem_bytes();
  for (int32_t b = 0; b < n_blocks; ++b) {
    const size_t block_off = static_cast<size_t>(s.block_table[b]) * kv.block_bytes() + head_off;
    const int32_t j_end = std::min(bs, last_key + 1 - b * bs);
    to_f32(kv.type, kv.k + block_off, kt, static_cast<size_t>(j_end) * hd);
    to_f32(kv.type, kv.v + block_off, vt, static_cast<size_t>(j_end) * hd);
    for (int32_t r = 0; r < rows; ++r) {
      const int32_t g = r / u.nq, i = r % u.nq;
      const int32_t pos = first_pos + u.q0 + i;
      const int32_t n_valid = std::min(j_end, pos + 1 - b * bs);
      if (n_valid <= 0) continue;
      const float* qr = q + static_cast<int64_t>(s.q_begin + u.q0 + i) * q_stride +
                        static_cast<int64_t>(u.kv_head * group + g) * hd;
      float* srow = sc + static_cast<size_t>(r) * bs;
      float tile_max = -std::numeric_limits<float>::infinity();
      for (int32_t j = 0; j < n_valid; ++j) {
        const float* kj = kt + static_cast<size_t>(j) * hd;
        float dot = 0.0f;
        for (int32_t d = 0; d < hd; ++d) dot += qr[d] * kj[d];
        srow[j] = dot * scale;
        tile_max = std::max(tile_max, srow[j]);
      }
      const float m_new = std::max(m[r], tile_max);
      const float corr = std::exp(m[r] - m_new);  // 0 on the first tile (m = -inf)
      float* a = acc + static_cast<size_t>(r) * hd;
      float sum = 0.0f;
      for (int32_t d = 0; d < hd; ++d) a[d] *= corr;
      for (int32_t j = 0; j < n_valid; ++j) {
        const float p = std::exp(srow[j] - m_new);
        sum += p;
        const float* vj = vt + static_cast<size_t>(j) * hd;
        for (int32_t d = 0; d < hd; ++d) a[d] += p * vj[d];
      }
      l[r] = l[r] * corr + sum;
      m[r] = m_new;
    }
  }
  for (int32_t r = 0; r < rows; ++r) {
    const int32_t g = r / u.nq, i = r % u.nq;
    float* o = out + static_cast<int64_t>(s.q_begin + u.q0 + i) * out_stride +
               static_cast<int64_t>(u.kv_head * group + g) * hd;
    const float inv = 1.0f / l[r];
    const float* a = acc + static_cast<size_t>(r) * hd;
    for (int32_t d = 0; d < hd; ++d) o[d] = a[d] * inv;
  }
}

}  // namespace

bool kv_type_supported(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
}

void store_kv(const KvLayerView& kv, const float* k, const float* v, int64_t stride,
              const int64_t* slots, int64_t n_tokens, Isa) {
  const size_t eb = kv.elem_bytes();
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t block = slots[t] / kv.block_size;
    const int64_t off = slots[t] % kv.block_size;
    for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
      const size_t dst = static_cast<size_t>(block) * kv.block_bytes() +
                         (static_cast<size_t>(h) * kv.block_size + off) * kv.head_dim * eb;
      from_f32(kv.type, k + t * stride + h * kv.head_dim, kv.k + dst, kv.head_dim);
      from_f32(kv.type, v + t * stride + h * kv.head_dim, kv.v + dst, kv.head_dim);
    }
  }
}

void copy_block(const KvLayerView& kv, int32_t src, int32_t dst) {
  const size_t bb = kv.block_bytes();
  std::memcpy(kv.k + static_cast<size_t>(dst) * bb, kv.k + static_cast<size_t>(src) * bb, bb);
  std::memcpy(kv.v + static_cast<size_t>(dst) * bb, kv.v + static_cast<size_t>(src) * bb, bb);
}

void paged_attention(const KvLayerView& kv, const float* q, int64_t q_stride, float* out,
                     int64_t out_stride, std::span<const AttentionSeq> seqs,
                     const AttentionShape& shape, const KernelContext& ctx) {
  TESSERA_CHECK(shape.n_heads % kv.n_kv_heads == 0, kInvalidArgument,
                "attention: {} query heads not a multiple of {} kv heads", shape.n_heads, kv.n_kv_heads);
  const int32_t group = shape.n_heads / kv.n_kv_heads;
  std::vector<WorkUnit> units;
  for (int32_t si = 0; si < static_cast<int32_t>(seqs.size()); ++si) {
    const AttentionSeq& s = seqs[si];
    TESSERA_ASSERT(s.q_len <= s.kv_len);
    for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
      for (int32_t q0 = 0; q0 < s.q_len; q0 += kQueryTile) {
        units.push_back({si, h, q0, std::min(kQueryTile, s.q_len - q0)});
      }
    }
  }
  const size_t per_thread = scratch_floats(kv, group);
  const int nth = ctx.pool->size();
  ctx.ws->tmp.ensure(per_thread * nth);
  float* scratch = ctx.ws->tmp.data();
  // Units differ in cost (context lengths differ): hand them out dynamically.
  // Which thread computes a unit does not change its arithmetic.
  std::atomic<size_t> next{0};
  ctx.pool->run([&](int tid, int) {
    float* mine = scratch + per_thread * tid;
    for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < units.size();
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      const WorkUnit& u = units[i];
      attend_unit(kv, q, q_stride, out, out_stride, seqs[u.seq], u, group, shape.scale, mine);
    }
  });
}

}  // namespace tessera::kernels
