// lora_shrink() / lora_expand(): argument checks and the choice of kernel
// table. The kernels are in lora_delta_ref.cc and lora_delta_<isa>.cc.
#include "kernels/lora_delta.h"

#include "core/error.h"
#include "kernels/lora_delta_kernels.h"

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

void lora_shrink(const float* a, int64_t rank, int64_t in, float scale, const float* x, int64_t x_stride,
                 const int32_t* rows, int64_t n, float* ax, Isa isa) {
  TESSERA_CHECK(rank >= 1 && in >= 1 && n >= 0 && (n <= 1 || x_stride >= in), kInvalidArgument,
                "lora_shrink: rank {} in {} n {} x_stride {} do not fit", rank, in, n, x_stride);
  if (n == 0) return;
  const LoraShrinkArgs args{a, rank, in, scale, x, x_stride, rows, n, ax};
  lora_delta_table(isa).shrink(args);
}

void lora_expand(const float* b, int64_t rank, int64_t out, const float* ax, float* y, int64_t y_stride,
                 const int32_t* rows, int64_t n, Isa isa) {
  TESSERA_CHECK(rank >= 1 && out >= 1 && n >= 0 && (n <= 1 || y_stride >= out),
                kInvalidArgument, "lora_expand: rank {} out {} n {} y_stride {} do not fit", rank, out, n, y_stride);
  if (n == 0) return;
  const LoraExpandArgs args{b, rank, out, ax, y, y_stride, rows, n};
  lora_delta_table(isa).expand(args);
}

}  // namespace tessera::kernels
