// matmul(): argument checks, the choice of kernel table, activation
// quantization into the workspace and the split of work across threads.
// The kernels themselves are in matmul_ref.cc and matmul_<isa>.cc.
#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/block_values.h"
#include "kernels/blocks.h"
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"
#include "kernels/sparse_kernels.h"

namespace tessera::kernels {
namespace {

struct TypeInfo {
  WType wtype;
  int block;  // activation quantization block (0: float activations)
  int group;  // activation sum group
  bool sparse = false;  // SP_Q8_0 / SP_Q4_0: MatmulKernels::sparse_range (wtype: the dense type's)
};

bool type_info(DType t, TypeInfo* out) {
  switch (t) {
    case DType::kF32: *out = {WType::kF32, 0, 0}; return true;
    case DType::kF16: *out = {WType::kF16, 0, 0}; return true;
    case DType::kBF16: *out = {WType::kBF16, 0, 0}; return true;
    case DType::kQ8_0: *out = {WType::kQ8_0, 32, 32}; return true;
    case DType::kQ4_0: *out = {WType::kQ4_0, 32, 32}; return true;
    case DType::kQ4_K: *out = {WType::kQ4_K, 256, 32}; return true;
    case DType::kQ5_K: *out = {WType::kQ5_K, 256, 32}; return true;
    case DType::kQ6_K: *out = {WType::kQ6_K, 256, 16}; return true;
    case DType::kQ3_K: *out = {WType::kQ3_K, 256, 16}; return true;
    case DType::kQ4_1: *out = {WType::kQ4_1, 32, 32}; return true;
    case DType::kQ5_0: *out = {WType::kQ5_0, 32, 32}; return true;
    case DType::kQ5_1: *out = {WType::kQ5_1, 32, 32}; return true;
    case DType::kIQ4_NL: *out = {WType::kIQ4_NL, 32, 32}; return true;
    case DType::kMXFP4: *out = {WType::kMXFP4, 32, 32}; return true;
    case DType::kQ2_K: *out = {WType::kQ2_K, 256, 16}; return true;
    case DType::kIQ4_XS: *out = {WType::kIQ4_XS, 256, 32}; return true;
    case DType::kTQ1_0: *out = {WType::kTQ1_0, 256, 32}; return true;
    case DType::kTQ2_0: *out = {WType::kTQ2_0, 256, 32}; return true;
    case DType::kSpQ8_0: *out = {WType::kQ8_0, 32, 32, true}; return true;
    case DType::kSpQ4_0: *out = {WType::kQ4_0, 32, 32, true}; return true;
    default: return false;
  }
}

ActLayout act_layout(int64_t k, int block, int group) {
  ActLayout l;
  l.k = k;
  l.block = block;
  l.group = group;
  l.d_offset = static_cast<size_t>(k);  // k is a multiple of 32: floats stay aligned
  l.sum_offset = l.d_offset + 4 * static_cast<size_t>(k / block);
  l.row_bytes = (l.sum_offset + 2 * static_cast<size_t>(k / group) + 63) / 64 * 64;
  return l;
}

// One weight of a shared-input product: the weight, its repacked rows (or
// null) and where its outputs go.
struct Job {
  const WeightView* w;
  const uint8_t* packed;
  float* y;
  int64_t y_stride;
  const int32_t* row_index = nullptr;  // matmul_rows: the rows computed (y's columns)
  int64_t n_rows = 0;
  int64_t out_rows() const { return row_index != nullptr ? n_rows : w->rows; }
};

void run_matmul(const MatmulKernels& kernels, const Job* jobs, size_t n_jobs, const float* x, int64_t x_stride,
                int64_t n_tokens, const KernelContext& ctx);

void run_grouped(const MatmulKernels& kernels, std::span<const GroupedMatmul> jobs, const KernelContext& ctx);

// A job's kernel arguments over input x (quantized into act), and the
// kernel that computes its rows (below).
MatmulRangeFn job_args(const MatmulKernels& kernels, const TypeInfo& info, const Job& job, const float* x,
                       int64_t x_stride, const uint8_t* act, const ActLayout& layout, MatmulArgs* out);

}  // namespace

bool matmul_supports(DType type) {
  TypeInfo info;
  return type_info(type, &info);
}

const MatmulKernels& matmul_kernels(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return matmul_kernels_avx2();
    case Isa::kAvx512: return amx_usable() ? matmul_kernels_amx() : matmul_kernels_avx512();
    case Isa::kScalar: break;
  }
  return matmul_kernels_ref();
}

const char* matmul_kernels_name(Isa isa) { return matmul_kernels(isa).name; }

namespace {

// The 8 rows of group g (the last group padded with copies of the last row).
const uint8_t* group_row(const WeightView& w, int64_t g, int64_t r) {
  const int64_t row = g * kRowTile + r < w.rows ? g * kRowTile + r : w.rows - 1;
  return w.data + static_cast<size_t>(row) * w.row_bytes;
}

// The packed layout of a weight type, if it has one.
bool packed_kind(DType t, Packed* out) {
  switch (t) {
    case DType::kQ8_0: *out = Packed::kQ8_0; return true;
    case DType::kQ4_0: *out = Packed::kQ4_0; return true;
    case DType::kIQ4_NL: *out = Packed::kIQ4_NL; return true;
    case DType::kMXFP4: *out = Packed::kMXFP4; return true;
    case DType::kQ4_1: *out = Packed::kQ4_1; return true;
    case DType::kQ5_0: *out = Packed::kQ5_0; return true;
    case DType::kQ5_1: *out = Packed::kQ5_1; return true;
    case DType::kIQ4_XS: *out = Packed::kIQ4_XS; return true;
    case DType::kQ2_K: *out = Packed::kQ2_K; return true;
    case DType::kTQ1_0: case DType::kTQ2_0: *out = Packed::kTQ2_0; return true;
    case DType::kQ4_K: *out = Packed::kQ4_K; return true;
    case DType::kQ5_K: *out = Packed::kQ5_K; return true;
    case DType::kQ6_K: *out = Packed::kQ6_K; return true;
    case DType::kQ3_K: *out = Packed::kQ3_K; return true;
    default: return false;
  }
}

// Walks the packed layout: for each group of 8 rows and each block in
// order, fill(out, blk, r) writes row r's part of the packed block at out
// (out_bytes each) from that row's block blk (`values` values, in_bytes).
template <class Fill>
void pack_groups(const WeightView& w, int64_t values, size_t in_bytes, size_t out_bytes, uint8_t* out, Fill fill) {
  const int64_t nb = w.cols / values, groups = (w.rows + kRowTile - 1) / kRowTile;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < nb; ++b, out += out_bytes) {
      for (int r = 0; r < kRowTile; ++r) fill(out, group_row(w, g, r) + static_cast<size_t>(b) * in_bytes, r);
    }
  }
}

// Q8_0, Q4_0 and IQ4_NL (Q4_0's block with levels for nibbles); MXFP4 the
// same with its E8M0 scale written as the fp16 of 2^(e - 128) (only called
// when mxfp4_scales_fit_fp16).
void pack_q8_0_q4_0(const WeightView& w, uint8_t* out) {
  const bool q8 = w.type == DType::kQ8_0, mx = w.type == DType::kMXFP4;
  const size_t in_block = q8 ? 34 : mx ? 17 : 18, out_block = q8 ? kPackedQ8_0Block : kPackedQ4_0Block;
  const size_t scale_bytes = mx ? 1 : 2, value_bytes = in_block - scale_bytes;  // 32 or 16 bytes of values
  pack_groups(w, 32, in_block, out_block, out, [&](uint8_t* o, const uint8_t* blk, int r) {
    if (mx) {
      const fp16_t h = f32_to_fp16(e8m0_half(blk[0]));
      std::memcpy(o + 2 * r, &h, 2);
    } else {
      std::memcpy(o + 2 * r, blk, 2);  // fp16 scale
    }
    for (size_t j = 0; j < value_bytes / 4; ++j) std::memcpy(o + 16 + 32 * j + 4 * r, blk + scale_bytes + 4 * j, 4);
  });
}

// Q4_1, Q5_0, Q5_1 (blocks.h): d (and m), the fifth bits rearranged
// (matmul_kernels.h), the nibbles as Q4_0's.
void pack_legacy(const WeightView& w, uint8_t* out) {
  const bool min = w.type != DType::kQ5_0, fifth = w.type != DType::kQ4_1;
  const size_t in_block = dtype_traits(w.type).type_size;
  const size_t qh_in = min ? 4 : 2, qs_in = qh_in + (fifth ? 4 : 0);
  const size_t qh_out = 16 + (min ? 16 : 0), qs_out = qh_out + (fifth ? 32 : 0);
  const Packed kind = w.type == DType::kQ4_1 ? Packed::kQ4_1 : w.type == DType::kQ5_0 ? Packed::kQ5_0 : Packed::kQ5_1;
  pack_groups(w, 32, in_block, kPackedBytes[static_cast<int>(kind)], out, [&](uint8_t* o, const uint8_t* blk, int r) {
    std::memcpy(o + 2 * r, blk, 2);                   // fp16 d
    if (min) std::memcpy(o + 16 + 2 * r, blk + 2, 2);  // fp16 m
    if (fifth) {
      uint32_t h;
      std::memcpy(&h, blk + qh_in, 4);
      for (int i = 0; i < 4; ++i) {
        uint8_t byte = 0;
        for (int k = 0; k < 4; ++k) {
          byte |= static_cast<uint8_t>(((h >> (4 * k + i)) & 1) << k);
          byte |= static_cast<uint8_t>(((h >> (16 + 4 * k + i)) & 1) << (4 + k));
        }
        o[qh_out + 4 * r + i] = byte;
      }
    }
    for (size_t j = 0; j < 4; ++j) std::memcpy(o + qs_out + 32 * j + 4 * r, blk + qs_in + 4 * j, 4);
  });
}

// IQ4_XS (blocks.h): d, the scales as int8 (ls - 32), each sub-block's
// nibbles as Q4_0's packed values.
void pack_iq4_xs(const WeightView& w, uint8_t* out) {
  pack_groups(w, 256, sizeof(BlockIQ4_XS), kPackedIQ4_XSBlock, out, [&](uint8_t* o, const uint8_t* blk, int r) {
    BlockIQ4_XS b;
    std::memcpy(&b, blk, sizeof b);
    std::memcpy(o + 2 * r, &b.d, 2);
    for (int s = 0; s < 8; ++s) {
      o[16 + 8 * s + r] = static_cast<uint8_t>(static_cast<int8_t>(iq4_xs_scale(b, s)));
      for (int h = 0; h < 4; ++h) std::memcpy(o + 80 + 128 * s + 32 * h + 4 * r, b.qs + 16 * s + 4 * h, 4);
    }
  });
}

// Q2_K (blocks.h): d, dmin, the 4-bit scales and mins as bytes, the 2-bit
// values in Q3_K's packed order.
void pack_q2_k(const WeightView& w, uint8_t* out) {
  pack_groups(w, 256, sizeof(BlockQ2_K), kPackedQ2_KBlock, out, [&](uint8_t* o, const uint8_t* blk, int r) {
    BlockQ2_K b;
    std::memcpy(&b, blk, sizeof b);
    std::memcpy(o + 2 * r, &b.d, 2);
    std::memcpy(o + 16 + 2 * r, &b.dmin, 2);
    for (int s = 0; s < 16; ++s) {
      o[32 + 8 * s + r] = b.scales[s] & 15;
      o[160 + 8 * s + r] = b.scales[s] >> 4;
    }
    for (int n = 0; n < 2; ++n) {
      for (int q = 0; q < 8; ++q) {
        for (int i = 0; i < 4; ++i) {
          uint8_t byte = 0;
          for (int j = 0; j < 4; ++j) byte |= static_cast<uint8_t>(two_bit_value(b.qs, 128 * n + 32 * j + 4 * q + i) << (2 * j));
          o[288 + 256 * n + 32 * q + 4 * r + i] = byte;
        }
      }
    }
  });
}

// TQ2_0 and TQ1_0: d, then the ternary digits as 2-bit values in Q2_K's
// packed order.
void pack_ternary(const WeightView& w, uint8_t* out) {
  const bool tq1 = w.type == DType::kTQ1_0;
  const size_t in_bytes = tq1 ? sizeof(BlockTQ1_0) : sizeof(BlockTQ2_0);
  pack_groups(w, 256, in_bytes, kPackedTQ2_0Block, out, [&](uint8_t* o, const uint8_t* blk, int r) {
    BlockTQ1_0 b1;
    BlockTQ2_0 b2;
    if (tq1) {
      std::memcpy(&b1, blk, sizeof b1);
      std::memcpy(o + 2 * r, &b1.d, 2);
    } else {
      std::memcpy(&b2, blk, sizeof b2);
      std::memcpy(o + 2 * r, &b2.d, 2);
    }
    const auto t = [&](int v) { return tq1 ? tq1_0_value(b1, v) + 1 : two_bit_value(b2.qs, v); };
    for (int n = 0; n < 2; ++n) {
      for (int q = 0; q < 8; ++q) {
        for (int i = 0; i < 4; ++i) {
          uint8_t byte = 0;
          for (int j = 0; j < 4; ++j) byte |= static_cast<uint8_t>(t(128 * n + 32 * j + 4 * q + i) << (2 * j));
          o[16 + 256 * n + 32 * q + 4 * r + i] = byte;
        }
      }
    }
  });
}

// Whether every MXFP4 block scale 2^(e - 128) is an fp16 (e in 104..143,
// down to fp16's smallest subnormal): then the packed copy reads back the
// same float.
bool mxfp4_scales_fit_fp16(const WeightView& w) {
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = w.data + static_cast<size_t>(r) * w.row_bytes;
    for (int64_t b = 0; b < w.cols / 32; ++b) {
      if (row[17 * b] < 104 || row[17 * b] > 143) return false;
    }
  }
  return true;
}

// Q4_K: the 12 scale bytes s hold sc[j] = s[j] & 63 and m[j] = s[j + 4] & 63
// for j < 4; for j >= 4 the low 4 bits in the nibbles of s[j + 4] (sc low,
// m high) and the top 2 in the top bits of s[j - 4] (sc) and s[j] (m).
// Q5_K: the same, its qh (after the scales) interleaved after the values.
void pack_q4_k(const WeightView& w, uint8_t* out) {
  const bool q5 = w.type == DType::kQ5_K;
  const size_t in_bytes = q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  const size_t qs_at = q5 ? 48 : 16;
  pack_groups(w, 256, in_bytes, q5 ? kPackedQ5_KBlock : kPackedQ4_KBlock, out, [&](uint8_t* o, const uint8_t* blk, int r) {
    const uint8_t* s = blk + 4;
    std::memcpy(o + 2 * r, blk, 2);           // d
    std::memcpy(o + 16 + 2 * r, blk + 2, 2);  // dmin
    for (int j = 0; j < 8; ++j) {
      const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
      const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
      o[32 + 8 * j + r] = static_cast<uint8_t>(sc);
      o[96 + 16 * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(m);
    }
    for (int p = 0; p < 4; ++p) {
      for (int h = 0; h < 8; ++h) std::memcpy(o + 160 + 256 * p + 32 * h + 4 * r, blk + qs_at + 32 * p + 4 * h, 4);
    }
    if (q5) {
      for (int h = 0; h < 8; ++h) std::memcpy(o + kPackedQ4_KBlock + 32 * h + 4 * r, blk + 16 + 4 * h, 4);
    }
  });
}

// Q6_K: the scales re-ordered; each value's 6-bit q decoded from ql / qh
// (value 128 n + 32 j + l: low 4 bits in ql[64 n + 32 (j % 2) + l], the
// low nibble for j < 2; high 2 in bits 2 j of qh[32 n + l]) and stored 4
// values in 3 bytes (layout in matmul_kernels.h).
void pack_q6_k(const WeightView& w, uint8_t* out) {
  pack_groups(w, 256, sizeof(BlockQ6_K), kPackedQ6_KBlock, out, [](uint8_t* o, const uint8_t* blk, int r) {
    const uint8_t *ql = blk, *qh = blk + 128, *sc = blk + 192;
    std::memcpy(o + 2 * r, blk + 208, 2);  // d
    for (int s = 0; s < 16; ++s) o[16 + 16 * (s / 2) + 2 * r + s % 2] = sc[s];
    const auto q6 = [&](int n, int j, int l) {
      const uint8_t low = ql[64 * n + 32 * (j % 2) + l];
      return (j < 2 ? low & 15 : low >> 4) | ((qh[32 * n + l] >> (2 * j)) & 3) << 4;
    };
    for (int n = 0; n < 2; ++n) {
      for (int g = 0; g < 8; ++g) {
        for (int k = 0; k < 3; ++k) {
          for (int i = 0; i < 4; ++i) {
            const int l = 4 * g + i;
            o[144 + 768 * n + 96 * g + 32 * k + 4 * r + i] =
                static_cast<uint8_t>(q6(n, k, l) | ((q6(n, 3, l) >> (2 * k)) & 3) << 6);
          }
        }
      }
    }
  });
}

// Q3_K: the 6-bit scales decoded (minus 32) into Q6_K's pairs; each value
// as u = q + 4, re-laid out as in matmul_kernels.h.
void pack_q3_k(const WeightView& w, uint8_t* out) {
  pack_groups(w, 256, sizeof(BlockQ3_K), kPackedQ3_KBlock, out, [](uint8_t* o, const uint8_t* bytes, int r) {
    BlockQ3_K blk;
    std::memcpy(&blk, bytes, sizeof blk);  // rows need not be aligned
    std::memcpy(o + 2 * r, &blk.d, 2);
    for (int sb = 0; sb < 16; ++sb) o[16 + 16 * (sb / 2) + 2 * r + sb % 2] = static_cast<uint8_t>(q3_k_scale(blk, sb));
    const auto u = [&](int v) { return q3_k_value(blk, v) + 4; };
    for (int n = 0; n < 2; ++n) {
      for (int g = 0; g < 8; ++g) {
        uint8_t* at = o + 144 + 384 * n + 96 * (g / 2);
        for (int i = 0; i < 4; ++i) {
          int low = 0, third = 0;
          for (int j = 0; j < 4; ++j) {
            const int v = u(128 * n + 32 * j + 4 * g + i);
            low |= (v & 3) << (2 * j);
            third |= (v >> 2) << (j + 4 * (g % 2));
          }
          at[32 * (g % 2) + 4 * r + i] = static_cast<uint8_t>(low);
          at[64 + 4 * r + i] = static_cast<uint8_t>(g % 2 == 0 ? third : at[64 + 4 * r + i] | third);
        }
      }
    }
  });
}

}  // namespace

bool reads_packed_only(const PreparedWeight& p, Isa isa) {
  Packed kind;
  if (p.packed.empty() || p.w8 || !packed_kind(p.view.type, &kind)) return false;
  return matmul_kernels(isa).packed_range[static_cast<int>(kind)] != nullptr;
}

PreparedWeight prepare_weight(const WeightView& w) {
  PreparedWeight p;
  p.view = w;
  Packed kind;
  if (!packed_kind(w.type, &kind)) return p;  // no packed layout
  const int64_t block = kPackedValues[static_cast<int>(kind)];
  const size_t block_bytes = kPackedBytes[static_cast<int>(kind)];
  if (w.rows <= 0 || w.cols <= 0 || w.cols % block != 0 || w.row_bytes < row_bytes(w.type, w.cols)) {
    return p;  // nothing to pack (bad shapes are reported by matmul())
  }
  if (w.type == DType::kMXFP4 && !mxfp4_scales_fit_fp16(w)) return p;  // the plain rows' kernel takes any scale
  const int64_t groups = (w.rows + kRowTile - 1) / kRowTile;
  p.packed.resize(static_cast<size_t>(groups * (w.cols / block)) * block_bytes);
  if (w.type == DType::kQ4_K || w.type == DType::kQ5_K) {
    pack_q4_k(w, p.packed.data());
  } else if (w.type == DType::kQ6_K) {
    pack_q6_k(w, p.packed.data());
  } else if (w.type == DType::kQ3_K) {
    pack_q3_k(w, p.packed.data());
  } else if (w.type == DType::kIQ4_XS) {
    pack_iq4_xs(w, p.packed.data());
  } else if (w.type == DType::kQ2_K) {
    pack_q2_k(w, p.packed.data());
  } else if (w.type == DType::kTQ1_0 || w.type == DType::kTQ2_0) {
    pack_ternary(w, p.packed.data());
  } else if (w.type == DType::kQ4_1 || w.type == DType::kQ5_0 || w.type == DType::kQ5_1) {
    pack_legacy(w, p.packed.data());
  } else {
    pack_q8_0_q4_0(w, p.packed.data());
  }
  return p;
}

namespace {

bool can_prepare_int(const WeightView& w) {
  return can_dequantize(w.type) && w.input_cols() == w.cols && w.rows > 0 && w.cols > 0 && w.cols <= 65536;
}

// Each row's codes and scale (bits 4 or 8), [rows][cols] and [rows].
void quantize_int(const WeightView& w, int bits, std::vector<int8_t>& q, std::vector<float>& sw) {
  std::vector<float> rows(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w.type, w.data + static_cast<size_t>(r) * w.row_bytes, rows.data() + r * w.cols, w.cols);
  }
  q.resize(rows.size());
  sw.resize(static_cast<size_t>(w.rows));
  if (bits == 4) {
    quantize_rows_w4(rows.data(), w.rows, w.cols, q.data(), sw.data());
  } else {
    quantize_rows_w8(rows.data(), w.rows, w.cols, q.data(), sw.data());
  }
}

std::shared_ptr<const W8Matrix> pack_int(const int8_t* q, const float* sw, int64_t rows, int64_t cols, int bits) {
  return std::make_shared<const W8Matrix>(bits == 4 ? pack_w4(q, sw, rows, cols) : pack_w8(q, sw, rows, cols));
}

PreparedWeight prepare_weight_int(const WeightView& w, int bits) {
  if (!can_prepare_int(w)) return prepare_weight(w);
  std::vector<int8_t> q;
  std::vector<float> sw;
  quantize_int(w, bits, q, sw);
  PreparedWeight p;
  p.view = w;
  p.w8 = pack_int(q.data(), sw.data(), w.rows, w.cols, bits);
  return p;
}

}  // namespace

PreparedWeight prepare_weight_w8a8(const WeightView& w) { return prepare_weight_int(w, 8); }
PreparedWeight prepare_weight_w4a8(const WeightView& w) { return prepare_weight_int(w, 4); }

PreparedWeight prepare_weight_int_cols(const WeightView& w, int bits, int64_t c0, int64_t n) {
  TESSERA_CHECK(c0 >= 0 && n > 0 && c0 + n <= w.cols, kInvalidArgument, "columns [{}, {}) of a {}-column matrix", c0,
                c0 + n, w.cols);
  PreparedWeight p;
  p.view = {w.type, nullptr, w.rows, n, row_bytes(w.type, n)};
  if (!can_prepare_int(w)) return p;
  std::vector<int8_t> q, part(static_cast<size_t>(w.rows * n));
  std::vector<float> sw;
  quantize_int(w, bits, q, sw);
  for (int64_t r = 0; r < w.rows; ++r) std::copy_n(q.begin() + r * w.cols + c0, n, part.begin() + r * n);
  p.w8 = pack_int(part.data(), sw.data(), w.rows, n, bits);
  return p;
}

void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, const KernelContext& ctx) {
  TESSERA_CHECK(isa_supported(ctx.isa), kInvalidArgument, "matmul: ISA {} is not supported by this CPU",
                isa_name(ctx.isa));
  matmul_with(matmul_kernels(ctx.isa), w, x, x_stride, n_tokens, y, y_stride, ctx);
}

void matmul(const PreparedWeight& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, const KernelContext& ctx) {
  TESSERA_CHECK(isa_supported(ctx.isa), kInvalidArgument, "matmul: ISA {} is not supported by this CPU",
                isa_name(ctx.isa));
  matmul_with(matmul_kernels(ctx.isa), w, x, x_stride, n_tokens, y, y_stride, ctx);
}

void matmul_with(const MatmulKernels& kernels, const WeightView& w, const float* x, int64_t x_stride,
                 int64_t n_tokens, float* y, int64_t y_stride, const KernelContext& ctx) {
  const Job job{&w, nullptr, y, y_stride};
  run_matmul(kernels, &job, 1, x, x_stride, n_tokens, ctx);
}

void matmul_with(const MatmulKernels& kernels, const PreparedWeight& w, const float* x, int64_t x_stride,
                 int64_t n_tokens, float* y, int64_t y_stride, const KernelContext& ctx) {
  if (w.w8 != nullptr) {
    matmul_w8a8(*w.w8, x, x_stride, n_tokens, y, y_stride, ctx);
    return;
  }
  const Job job{&w.view, w.packed.empty() ? nullptr : w.packed.data(), y, y_stride};
  run_matmul(kernels, &job, 1, x, x_stride, n_tokens, ctx);
}

void matmul_rows(const WeightView& w, std::span<const int32_t> rows, const float* x, int64_t x_stride,
                 int64_t n_tokens, float* y, int64_t y_stride, const KernelContext& ctx) {
  TESSERA_CHECK(isa_supported(ctx.isa), kInvalidArgument, "matmul: ISA {} is not supported by this CPU",
                isa_name(ctx.isa));
  matmul_rows_with(matmul_kernels(ctx.isa), w, rows, x, x_stride, n_tokens, y, y_stride, ctx);
}

void matmul_rows_with(const MatmulKernels& kernels, const WeightView& w, std::span<const int32_t> rows,
                      const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
                      const KernelContext& ctx) {
  TypeInfo info{};
  TESSERA_CHECK(type_info(w.type, &info) && !info.sparse, kInvalidArgument, "matmul_rows: {} rows cannot be gathered",
                dtype_name(w.type));
  for (const int32_t r : rows) {
    TESSERA_CHECK(r >= 0 && r < w.rows, kInvalidArgument, "matmul_rows: row {} of a {}-row weight", r, w.rows);
  }
  if (rows.empty()) return;
  Job job{&w, nullptr, y, y_stride};
  job.row_index = rows.data();
  job.n_rows = static_cast<int64_t>(rows.size());
  run_matmul(kernels, &job, 1, x, x_stride, n_tokens, ctx);
}

void matmul_shared_input(std::span<const MatmulOutput> outs, const float* x, int64_t x_stride, int64_t n_tokens,
                         const KernelContext& ctx) {
  TESSERA_CHECK(isa_supported(ctx.isa), kInvalidArgument, "matmul: ISA {} is not supported by this CPU",
                isa_name(ctx.isa));
  bool same = !outs.empty();
  for (const MatmulOutput& o : outs) {
    same = same && o.w->view.type == outs[0].w->view.type && o.w->view.cols == outs[0].w->view.cols &&
           o.w->view.x_cols == outs[0].w->view.x_cols && o.w->w8 == nullptr;
  }
  if (!same) {  // e.g. a GGUF mixing Q4_K and Q6_K: one product each
    for (const MatmulOutput& o : outs) matmul(*o.w, x, x_stride, n_tokens, o.y, o.y_stride, ctx);
    return;
  }
  Job jobs[kMaxSharedInput];
  TESSERA_CHECK(outs.size() <= kMaxSharedInput, kInvalidArgument, "matmul_shared_input: at most {} outputs",
                kMaxSharedInput);
  for (size_t i = 0; i < outs.size(); ++i) {
    const PreparedWeight& w = *outs[i].w;
    jobs[i] = {&w.view, w.packed.empty() ? nullptr : w.packed.data(), outs[i].y, outs[i].y_stride};
  }
  run_matmul(matmul_kernels(ctx.isa), jobs, outs.size(), x, x_stride, n_tokens, ctx);
}

void matmul_grouped(std::span<const GroupedMatmul> jobs, const KernelContext& ctx) {
  TESSERA_CHECK(isa_supported(ctx.isa), kInvalidArgument, "matmul: ISA {} is not supported by this CPU",
                isa_name(ctx.isa));
  if (jobs.empty()) return;
  const WeightView& w0 = jobs[0].w->view;
  bool same = w0.input_cols() == w0.cols;
  for (const GroupedMatmul& j : jobs) {
    same = same && j.w->view.type == w0.type && j.w->view.cols == w0.cols && j.w->view.x_cols == w0.x_cols &&
           j.w->w8 == nullptr;
  }
  if (!same) {
    for (const GroupedMatmul& j : jobs) matmul(*j.w, j.x, j.x_stride, j.n_tokens, j.y, j.y_stride, ctx);
    return;
  }
  run_grouped(matmul_kernels(ctx.isa), jobs, ctx);
}

namespace {

void check_weight(const WeightView& w, int64_t x_stride, int64_t n_tokens, int64_t y_stride, int64_t out_rows) {
  TypeInfo info;
  TESSERA_CHECK(type_info(w.type, &info), kInvalidArgument, "matmul: unsupported weight type {}",
                dtype_name(w.type));
  const int64_t bs = dtype_traits(w.type).block_size;
  TESSERA_CHECK(w.rows >= 0 && w.cols > 0 && w.cols % bs == 0, kInvalidArgument,
                "matmul: {} weight of {} x {}: columns must be a positive multiple of {}", dtype_name(w.type),
                w.rows, w.cols, bs);
  TESSERA_CHECK(w.row_bytes >= row_bytes(w.type, w.cols), kInvalidArgument,
                "matmul: row stride {} bytes is less than a {} row of {} ({} bytes)", w.row_bytes,
                dtype_name(w.type), w.cols, row_bytes(w.type, w.cols));
  TESSERA_CHECK(w.x_cols >= 0 && w.x_cols <= w.cols && w.cols - w.input_cols() < bs, kInvalidArgument,
                "matmul: {} inputs padded to {} columns (more than one {} block)", w.x_cols, w.cols,
                dtype_name(w.type));
  TESSERA_CHECK(n_tokens >= 0 && (n_tokens <= 1 || (x_stride >= w.input_cols() && y_stride >= out_rows)),
                kInvalidArgument, "matmul: {} tokens with x stride {} (< {} columns) or y stride {} (< {} rows)",
                n_tokens, x_stride, w.input_cols(), y_stride, out_rows);
}

// A job's kernel arguments over input x (quantized into act), and the
// kernel that computes its rows: the packed one when the weight was repacked.
MatmulRangeFn job_args(const MatmulKernels& kernels, const TypeInfo& info, const Job& job, const float* x,
                       int64_t x_stride, const uint8_t* act, const ActLayout& layout, MatmulArgs* out) {
  const WeightView& w = *job.w;
  MatmulArgs& a = *out;
  a.w = w.data;
  a.rows = w.rows;
  a.cols = w.cols;
  a.row_bytes = w.row_bytes;
  a.x = x;
  a.x_stride = x_stride;
  a.y = job.y;
  a.y_stride = job.y_stride;
  a.act = act;
  a.act_layout = layout;
  MatmulRangeFn range = kernels.range[static_cast<int>(info.wtype)];
  if (job.row_index != nullptr) {  // gathered rows: the kernels on the original rows
    a.row_index = job.row_index;
    a.rows = job.n_rows;
    return range;
  }
  if (info.sparse) {
    a.dense = kernels.packed_range[static_cast<int>(info.wtype == WType::kQ4_0 ? Packed::kQ4_0 : Packed::kQ8_0)];
    return kernels.sparse_range;
  }
  if (job.packed != nullptr) {
    Packed kind = Packed::kQ8_0;
    packed_kind(w.type, &kind);  // the weight was packed, so it has one
    const MatmulRangeFn p = kernels.packed_range[static_cast<int>(kind)];
    if (p != nullptr) {
      range = p;
      a.w = job.packed;
    }
  }
  return range;
}

// Every job has the same weight type and column count, so the activation is
// quantized once for all of them, and one pool dispatch covers the row tiles
// of all of them: each row's arithmetic is what a product of its own weight
// alone would do (bit for bit), only the hand-offs are shared.
void run_matmul(const MatmulKernels& kernels, const Job* jobs, size_t n_jobs, const float* x, int64_t x_stride,
                int64_t n_tokens, const KernelContext& ctx) {
  const WeightView& w0 = *jobs[0].w;
  for (size_t j = 0; j < n_jobs; ++j) check_weight(*jobs[j].w, x_stride, n_tokens, jobs[j].y_stride, jobs[j].out_rows());
  if (n_tokens == 0) return;
  TypeInfo info{};
  type_info(w0.type, &info);
  const bool quantized = info.block != 0;

  Workspace local;  // only used when the caller gave none
  if (w0.input_cols() < w0.cols) {
    // Padded rows: the kernels read whole blocks, so x gets the zero
    // columns the weight has (jobs share x_cols: matmul_shared_input
    // groups only weights of equal width).
    Workspace* ws = ctx.ws != nullptr ? ctx.ws : &local;
    ws->padded_x.ensure(static_cast<size_t>(n_tokens * w0.cols));
    float* px = ws->padded_x.data();
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::memcpy(px + t * w0.cols, x + t * x_stride, static_cast<size_t>(w0.x_cols) * sizeof(float));
      std::memset(px + t * w0.cols + w0.x_cols, 0, static_cast<size_t>(w0.cols - w0.x_cols) * sizeof(float));
    }
    x = px;
    x_stride = w0.cols;
  }
  uint8_t* act = nullptr;
  ActLayout layout;
  if (quantized) {
    layout = act_layout(w0.cols, info.block, info.group);
    Workspace* ws = ctx.ws != nullptr ? ctx.ws : &local;
    ws->act.ensure(static_cast<size_t>(n_tokens) * layout.row_bytes);
    act = ws->act.data();
  }
  MatmulArgs args[kMaxSharedInput];
  MatmulRangeFn range[kMaxSharedInput];
  // Rows are split in whole tiles so a tile never straddles two threads.
  const int64_t tile = info.sparse ? kSparseGroupRows : quantized ? kRowTile : 4;
  int64_t unit_end[kMaxSharedInput];  // cumulative row tiles through job j
  int64_t units = 0, work = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    const WeightView& w = *jobs[j].w;
    range[j] = job_args(kernels, info, jobs[j], x, x_stride, act, layout, &args[j]);
    const int64_t u = (jobs[j].out_rows() + tile - 1) / tile;
    units += u;
    unit_end[j] = units;
    work += jobs[j].out_rows() * w.cols * n_tokens;
  }
  const QuantizeActFn quantize = kernels.quantize_act;

  ThreadPool* pool = parallel_pool(ctx, work, quantized ? kMinParallelQuantMatmulMacs : kMinParallelFloatMatmulMacs);
  if (pool == nullptr) {
    if (quantized) quantize(x, x_stride, 0, n_tokens, act, layout);
    for (size_t j = 0; j < n_jobs; ++j) {
      if (args[j].rows > 0) range[j](args[j], 0, args[j].rows, 0, n_tokens);
    }
    return;
  }
  // One token's quantization is too short to share. More tokens are
  // quantized in chunks claimed like the rows, and the rows start once every
  // token is done: a thread that never starts holds nothing up, one that is
  // descheduled holds one small chunk.
  const bool quantize_inside = quantized && n_tokens > 1;
  if (quantized && !quantize_inside) quantize(x, x_stride, 0, n_tokens, act, layout);
  GuidedChunks quantize_chunks(n_tokens, 1);
  std::atomic<int64_t> tokens_quantized{0};
  // Chunks shrink as the work runs out (guided self-scheduling). Decode
  // chunks are whole groups of 4 tiles: its kernels take 1 or 2 at a time
  // (Cfg::kDecodeGroups).
  GuidedChunks row_chunks(units, n_tokens == 1 ? 4 : 1), token_chunks(n_tokens, 1);
  pool->run_dynamic([&](int, int n) {
    int64_t c0 = 0, c1 = 0;
    if (quantize_inside) {
      while (quantize_chunks.claim(n, &c0, &c1)) {
        quantize(x, x_stride, c0, c1, act, layout);
        tokens_quantized.fetch_add(c1 - c0, std::memory_order_release);
      }
      while (tokens_quantized.load(std::memory_order_acquire) < n_tokens) std::this_thread::yield();
    }
    if (units >= n) {
      // Row tiles of all jobs, in job order, taken in chunks from a shared
      // counter: on a shared machine one core often runs slower for a
      // while (another guest's work), and a static half each would leave
      // the other idle at the end of every call. Which thread computes a
      // row does not change its arithmetic, so results stay bit-identical.
      size_t j = 0;  // the first job a chunk can touch (chunks only move forward)
      while (row_chunks.claim(n, &c0, &c1)) {
        while (unit_end[j] <= c0) ++j;
        for (size_t k = j; k < n_jobs; ++k) {
          const int64_t first = k == 0 ? 0 : unit_end[k - 1];
          if (first >= c1) break;
          const int64_t lo = c0 > first ? c0 : first, hi = c1 < unit_end[k] ? c1 : unit_end[k];
          if (lo >= hi) continue;  // a job without rows
          const int64_t r0 = (lo - first) * tile, r1 = (hi - first) * tile;
          range[k](args[k], r0, r1 < args[k].rows ? r1 : args[k].rows, 0, n_tokens);
        }
      }
    } else {
      // Fewer row tiles than threads: split the tokens instead.
      while (token_chunks.claim(n, &c0, &c1)) {
        for (size_t j = 0; j < n_jobs; ++j) {
          if (args[j].rows > 0) range[j](args[j], 0, args[j].rows, c0, c1);
        }
      }
    }
  });
}

// matmul_grouped: the inputs (each distinct one once) are quantized in token
// chunks claimed across all of them, then the row tiles of every job are
// claimed as in run_matmul, each over all of its job's tokens.
void run_grouped(const MatmulKernels& kernels, std::span<const GroupedMatmul> jobs, const KernelContext& ctx) {
  const size_t n_jobs = jobs.size();
  const WeightView& w0 = jobs[0].w->view;
  TypeInfo info{};
  type_info(w0.type, &info);
  const bool quantized = info.block != 0;
  const ActLayout layout = quantized ? act_layout(w0.cols, info.block, info.group) : ActLayout{};
  // The distinct inputs, in job order, and each job's one.
  struct Input {
    const float* x;
    int64_t x_stride, n_tokens, first_row;  // first_row: where its rows start in the act buffer
  };
  std::vector<Input> inputs;
  std::vector<size_t> input_of(n_jobs);
  int64_t act_rows = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    const GroupedMatmul& g = jobs[j];
    check_weight(g.w->view, g.x_stride, g.n_tokens, g.y_stride, g.w->view.rows);
    if (inputs.empty() || inputs.back().x != g.x || inputs.back().x_stride != g.x_stride ||
        inputs.back().n_tokens != g.n_tokens) {
      inputs.push_back({g.x, g.x_stride, g.n_tokens, act_rows});
      act_rows += g.n_tokens;
    }
    input_of[j] = inputs.size() - 1;
  }
  Workspace local;
  Workspace* ws = ctx.ws != nullptr ? ctx.ws : &local;
  uint8_t* act = nullptr;
  if (quantized) {
    ws->act.ensure(static_cast<size_t>(act_rows) * layout.row_bytes);
    act = ws->act.data();
  }
  std::vector<MatmulArgs> args(n_jobs);
  std::vector<MatmulRangeFn> range(n_jobs);
  std::vector<int64_t> unit_end(n_jobs);
  const int64_t tile = info.sparse ? kSparseGroupRows : quantized ? kRowTile : 4;
  int64_t units = 0, work = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    const GroupedMatmul& g = jobs[j];
    const Job job{&g.w->view, g.w->packed.empty() ? nullptr : g.w->packed.data(), g.y, g.y_stride};
    const uint8_t* a = quantized ? act + static_cast<size_t>(inputs[input_of[j]].first_row) * layout.row_bytes : nullptr;
    range[j] = job_args(kernels, info, job, g.x, g.x_stride, a, layout, &args[j]);
    units += g.n_tokens > 0 ? (g.w->view.rows + tile - 1) / tile : 0;
    unit_end[j] = units;
    work += g.w->view.rows * g.w->view.cols * g.n_tokens;
  }
  const QuantizeActFn quantize = kernels.quantize_act;
  // Tokens [t0, t1) of the flattened inputs, quantized input by input.
  const auto quantize_rows = [&](int64_t t0, int64_t t1) {
    for (const Input& in : inputs) {
      const int64_t lo = std::max(t0, in.first_row), hi = std::min(t1, in.first_row + in.n_tokens);
      if (lo < hi) {
        quantize(in.x, in.x_stride, lo - in.first_row, hi - in.first_row,
                 act + static_cast<size_t>(in.first_row) * layout.row_bytes, layout);
      }
    }
  };
  // Row tiles [c0, c1) of the flattened jobs.
  const auto rows = [&](int64_t c0, int64_t c1, size_t* from) {
    while (unit_end[*from] <= c0) ++*from;
    for (size_t k = *from; k < n_jobs; ++k) {
      const int64_t first = k == 0 ? 0 : unit_end[k - 1];
      if (first >= c1) break;
      const int64_t lo = std::max(c0, first), hi = std::min(c1, unit_end[k]);
      if (lo >= hi) continue;  // a job without tokens
      const int64_t r0 = (lo - first) * tile, r1 = std::min((hi - first) * tile, args[k].rows);
      range[k](args[k], r0, r1, 0, jobs[k].n_tokens);
    }
  };
  ThreadPool* pool = parallel_pool(ctx, work, quantized ? kMinParallelQuantMatmulMacs : kMinParallelFloatMatmulMacs);
  if (pool == nullptr) {
    if (quantized) quantize_rows(0, act_rows);
    size_t from = 0;
    if (units > 0) rows(0, units, &from);
    return;
  }
  GuidedChunks quantize_chunks(act_rows, 1), row_chunks(units, 1);
  std::atomic<int64_t> quantized_rows{0};
  pool->run_dynamic([&](int, int n) {
    int64_t c0 = 0, c1 = 0;
    if (quantized) {
      while (quantize_chunks.claim(n, &c0, &c1)) {
        quantize_rows(c0, c1);
        quantized_rows.fetch_add(c1 - c0, std::memory_order_release);
      }
      while (quantized_rows.load(std::memory_order_acquire) < act_rows) std::this_thread::yield();
    }
    size_t from = 0;  // chunks only move forward
    while (row_chunks.claim(n, &c0, &c1)) rows(c0, c1, &from);
  });
}

}  // namespace

}  // namespace tessera::kernels
