// lora_shrink() / lora_expand(): argument checks and the choice of kernel
// table. The kernels are in lora_delta_ref.cc and lora_delta_<isa>.cc.
#include "kernels/lora_delta.h"

#include <algorithm>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/lora_delta_kernels.h"
#include "kernels/quant.h"

namespace tessera::kernels {
namespace {

const LoraKernels& lora_delta_table(Isa isa) {
  TESSERA_CHECK(isa_supported(isa), kInvalidArgument, "LoRA kernels: ISA {} is not supported by this CPU",
                isa_name(isa));
  switch (isa) {
    case Isa::kAvx2: return lora_kernels_avx2();
    case Isa::kAvx512: return lora_kernels_avx512();
    case Isa::kScalar: break;
  }
  return lora_kernels_ref();
}

}  // namespace

const char* lora_weight_type_name(LoraWeightType t) {
  switch (t) {
    case LoraWeightType::kF32: return "f32";
    case LoraWeightType::kF16: return "f16";
    case LoraWeightType::kQ8_0: return "q8_0";
  }
  return "?";
}

bool lora_row_fits(LoraWeightType t, int64_t n) { return n >= 1 && (t != LoraWeightType::kQ8_0 || n % kQK == 0); }

int64_t lora_row_bytes(LoraWeightType t, int64_t n) {
  switch (t) {
    case LoraWeightType::kF32: return 4 * n;
    case LoraWeightType::kF16: return 2 * n;
    case LoraWeightType::kQ8_0: return n / kQK * static_cast<int64_t>(sizeof(BlockQ8_0));
  }
  return 0;
}

void lora_pack_row(LoraWeightType t, const float* src, int64_t n, void* dst) {
  TESSERA_CHECK(lora_row_fits(t, n), kInvalidArgument, "LoRA weights: a row of {} values cannot be stored in {}", n,
                lora_weight_type_name(t));
  switch (t) {
    case LoraWeightType::kF32: std::copy_n(src, n, static_cast<float*>(dst)); break;
    case LoraWeightType::kF16:
      for (int64_t j = 0; j < n; ++j) static_cast<fp16_t*>(dst)[j] = f32_to_fp16(src[j]);
      break;
    case LoraWeightType::kQ8_0: quantize_row(DType::kQ8_0, src, dst, n); break;
  }
}

void lora_unpack_row(LoraWeightType t, const void* src, int64_t n, float* dst) {
  TESSERA_CHECK(lora_row_fits(t, n), kInvalidArgument, "LoRA weights: a row of {} values cannot be stored in {}", n,
                lora_weight_type_name(t));
  switch (t) {
    case LoraWeightType::kF32: std::copy_n(static_cast<const float*>(src), n, dst); break;
    case LoraWeightType::kF16:
      for (int64_t j = 0; j < n; ++j) dst[j] = fp16_to_f32(static_cast<const fp16_t*>(src)[j]);
      break;
    case LoraWeightType::kQ8_0: dequantize_row(DType::kQ8_0, src, dst, n); break;
  }
}

void lora_shrink(const void* a, int64_t rank, int64_t in, float scale, const float* x, int64_t x_stride,
                 const int32_t* rows, int64_t n, float* ax, Isa isa, LoraWeightType type) {
  TESSERA_CHECK(rank >= 1 && lora_row_fits(type, in) && n >= 0 && (n <= 1 || x_stride >= in), kInvalidArgument,
                "lora_shrink: rank {} in {} ({}) n {} x_stride {} do not fit", rank, in, lora_weight_type_name(type), n,
                x_stride);
  if (n == 0) return;
  const LoraShrinkArgs args{a, type, rank, in, scale, x, x_stride, rows, n, ax};
  lora_delta_table(isa).shrink(args);
}

void lora_expand(const void* b, int64_t rank, int64_t out, const float* ax, float* y, int64_t y_stride,
                 const int32_t* rows, int64_t n, Isa isa, LoraWeightType type) {
  TESSERA_CHECK(rank >= 1 && lora_row_fits(type, out) && n >= 0 && (n <= 1 || y_stride >= out), kInvalidArgument,
                "lora_expand: rank {} out {} ({}) n {} y_stride {} do not fit", rank, out, lora_weight_type_name(type), n,
                y_stride);
  if (n == 0) return;
  const LoraExpandArgs args{b, type, rank, out, ax, y, y_stride, rows, n};
  lora_delta_table(isa).expand(args);
}

}  // namespace tessera::kernels
