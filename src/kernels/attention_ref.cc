// Scalar reference of the tiled attention kernel: the same algorithm as
// attention_impl.h (block by block, online softmax) in plain C++, reading
// the tile layout element by element.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "kernels/attention_kernels.h"
#include "kernels/kv_codec.h"

namespace tessera::kernels {
namespace {

float load_elem(KvElem e, const uint8_t* base, size_t index) {
  switch (e) {
    case KvElem::kF32: return reinterpret_cast<const float*>(base)[index];
    case KvElem::kF16: return fp16_to_f32(reinterpret_cast<const fp16_t*>(base)[index]);
    case KvElem::kBF16: return bf16_to_f32(reinterpret_cast<const bf16_t*>(base)[index]);
    case KvElem::kQ8_0: case KvElem::kQ4_0: break;  // read through kv_value
  }
  return 0.0f;
}

void attend_ref(const AttnUnitArgs& a) {
  const int bs = a.block_size, hd = a.head_dim;
  const int rows = a.group * a.nq;
  float* s = a.scratch;                                  // [bs]
  float* acc = s + bs;                                   // [rows][hd]
  float* m = acc + static_cast<size_t>(rows) * hd;
  float* l = m + rows;
  std::fill(acc, acc + static_cast<size_t>(rows) * hd, 0.0f);
  std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
  std::fill(l, l + rows, 0.0f);
  const bool quantized = kv_quantized(a.elem);
  auto k_at = [&](const uint8_t* kb, int d, int j) {
    return quantized ? kv_value(a.elem, true, kb, bs, hd, d, j) : load_elem(a.elem, kb, static_cast<size_t>(d) * bs + j);
  };
  auto v_at = [&](const uint8_t* vb, int j, int d) {
    return quantized ? kv_value(a.elem, false, vb, bs, hd, d, j) : load_elem(a.elem, vb, static_cast<size_t>(j) * hd + d);
  };
  const bool mapped = a.key_pos != nullptr;
  const int last_key = mapped ? a.n_keys - 1 : a.first_pos + a.nq - 1;
  // Blocks wholly before the first row's window hold no key any row sees
  // (mapped slots hold positions in any order: every block is read).
  for (int b = mapped ? 0 : first_key(a.first_pos, a.window) / bs; b <= last_key / bs; ++b) {
    const uint8_t* kb = a.k + static_cast<size_t>(a.block_table[b]) * a.block_bytes + static_cast<size_t>(a.kv_head) * a.head_bytes;
    const uint8_t* vb = a.v + static_cast<size_t>(a.block_table[b]) * a.block_bytes + static_cast<size_t>(a.kv_head) * a.head_bytes;
    for (int r = 0; r < rows; ++r) {
      const int pos = a.first_pos + r % a.nq;
      // Dense: keys [j0, n_valid) of the block are seen. Mapped: the keys of
      // [0, j_end) whose positions the row sees.
      const int j_end = std::min(bs, last_key + 1 - b * bs);
      const int n_valid = mapped ? j_end : std::min(bs, pos + 1 - b * bs);
      const int j0 = mapped ? 0 : std::max(0, first_key(pos, a.window) - b * bs);
      const int32_t* kp = mapped ? a.key_pos + static_cast<size_t>(b) * bs : nullptr;
      auto seen = [&](int j) { return kp == nullptr || key_visible(kp[j], pos, a.window); };
      if (n_valid <= j0) continue;
      const float* q = a.q + static_cast<int64_t>(r % a.nq) * a.q_stride +
                       static_cast<int64_t>(a.kv_head * a.group + r / a.nq) * hd;
      float tile_max = -std::numeric_limits<float>::infinity();
      for (int j = j0; j < n_valid; ++j) {
        if (!seen(j)) continue;
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += q[d] * k_at(kb, d, j);
        s[j] = dot * a.scale;
        if (a.softcap > 0.0f) s[j] = softcap_score(s[j], a.softcap);
        tile_max = std::max(tile_max, s[j]);
      }
      if (tile_max == -std::numeric_limits<float>::infinity()) continue;  // no key of this block is seen
      const float m_new = std::max(m[r], tile_max);
      const float corr = std::isinf(m[r]) ? 0.0f : std::exp(m[r] - m_new);
      float* ar = acc + static_cast<size_t>(r) * hd;
      for (int d = 0; d < hd; ++d) ar[d] *= corr;
      float sum = 0.0f;
      // Attention mass capture (AttnUnitArgs::key_scores): the weights of
      // the block relative to m_new, 0 for a slot the row does not see.
      float* cap = a.key_scores != nullptr ? a.key_scores + static_cast<size_t>(r) * a.scores_ld + b * bs : nullptr;
      if (cap != nullptr) {
        std::fill(cap, cap + j_end, 0.0f);
        a.block_max[static_cast<size_t>(r) * (a.scores_ld / bs) + b] = m_new;
      }
      for (int j = j0; j < n_valid; ++j) {
        if (!seen(j)) continue;
        const float p = std::exp(s[j] - m_new);
        if (cap != nullptr) cap[j] = p;
        sum += p;
        for (int d = 0; d < hd; ++d) ar[d] += p * v_at(vb, j, d);
      }
      l[r] = l[r] * corr + sum;
      m[r] = m_new;
    }
  }
  float* f = l + rows;  // the sinks' rescaling of acc
  for (int r = 0; r < rows; ++r) f[r] = a.sinks != nullptr ? add_sink(row_sink(a, r), m[r], l[r]) : 1.0f;
  if (a.row_stats != nullptr) {
    for (int r = 0; r < rows; ++r) {
      a.row_stats[2 * r] = m[r];
      a.row_stats[2 * r + 1] = l[r];
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* o = a.out + static_cast<int64_t>(r % a.nq) * a.out_stride +
               static_cast<int64_t>(a.kv_head * a.group + r / a.nq) * hd;
    const float* ar = acc + static_cast<size_t>(r) * hd;
    for (int d = 0; d < hd; ++d) o[d] = (a.sinks != nullptr ? ar[d] * f[r] : ar[d]) / l[r];
  }
}

void to_kv_ref(KvElem e, const float* src, int32_t n, uint8_t* dst) {
  for (int32_t i = 0; i < n; ++i) {
    if (e == KvElem::kF32) {
      std::memcpy(dst + 4 * static_cast<size_t>(i), src + i, 4);
    } else {
      const uint16_t h = e == KvElem::kF16 ? f32_to_fp16(src[i]) : f32_to_bf16(src[i]);
      std::memcpy(dst + 2 * static_cast<size_t>(i), &h, 2);
    }
  }
}

constexpr AttentionKernels kTable = {"scalar", attend_ref, to_kv_ref};

}  // namespace

const AttentionKernels& attention_kernels_ref() { return kTable; }

}  // namespace tessera::kernels
