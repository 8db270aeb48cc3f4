#include "model/ffn_sparsity.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace tessera {
namespace {

double silu(double g) { return g / (1.0 + std::exp(-g)); }
double gelu_tanh(double g) {
  return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

// The g where f crosses -threshold (f falls from 0 to its minimum between 0
// and g_min, then rises back towards 0 below g_min), and where it crosses
// +threshold above 0: bisection on intervals where f is monotonic.
template <double (*f)(double)>
KeepInterval keep_interval(float threshold, double g_min) {
  const double thr = threshold;
  if (!(thr > 0.0)) return {-INFINITY, 0.0f, 0.0f};  // every nonzero activation
  const auto solve = [&](double a, double b, double target) {  // f(a) - target and f(b) - target differ in sign
    for (int i = 0; i < 200; ++i) {
      const double m = 0.5 * (a + b);
      if ((f(m) - target > 0) == (f(a) - target > 0)) a = m; else b = m;
    }
    return 0.5 * (a + b);
  };
  KeepInterval k;
  double hi_end = 1.0;
  while (f(hi_end) <= thr) hi_end *= 2.0;
  k.above = static_cast<float>(solve(0.0, hi_end, thr));
  if (-f(g_min) > thr) {
    double lo_end = g_min * 2.0;
    while (-f(lo_end) > thr) lo_end *= 2.0;
    k.lo = static_cast<float>(solve(lo_end, g_min, -thr));
    k.hi = static_cast<float>(solve(g_min, 0.0, -thr));
  }
  return k;
}

}  // namespace

double activation_value(bool gelu, double g) { return gelu ? gelu_tanh(g) : silu(g); }

KeepInterval silu_keep_interval(float threshold) { return keep_interval<silu>(threshold, -1.2784645427610738); }
KeepInterval gelu_keep_interval(float threshold) { return keep_interval<gelu_tanh>(threshold, -0.7517915246935645); }

std::vector<float> read_ffn_thresholds(const gguf::File& f, int64_t n_layer) {
  const gguf::Array* a = f.find_array(kFfnThresholdKey);
  if (a == nullptr) return {};
  const char* env = std::getenv("TESSERA_FFN_SPARSITY");
  if (env != nullptr && std::string_view(env) == "0") return {};
  std::vector<float> t = gguf::array_as_floats(*a, kFfnThresholdKey);
  TESSERA_CHECK(static_cast<int64_t>(t.size()) == n_layer, kCorruptFile, "{}: {} thresholds for {} layers",
                kFfnThresholdKey, t.size(), n_layer);
  for (const float v : t) {
    TESSERA_CHECK(std::isfinite(v) && v >= 0.0f, kCorruptFile, "{}: threshold {} is not a finite value >= 0",
                  kFfnThresholdKey, v);
  }
  return t;
}

FfnSparsity make_ffn_sparsity(float threshold, const kernels::WeightView& down) {
  FfnSparsity s;
  s.on = true;
  s.silu = silu_keep_interval(threshold);
  s.gelu = gelu_keep_interval(threshold);
  if (down.type == DType::kQ8_0 && down.input_cols() == down.cols) s.down_t = kernels::transpose_q8_0(down);
  return s;
}

int64_t select_neurons(const KeepInterval& k, const float* gate, int64_t T, int64_t F, uint8_t* keep,
                       std::vector<int32_t>& union_rows) {
  int64_t kept = 0;
  uint8_t* any = keep + T * F;
  std::fill(any, any + F, uint8_t{0});
  for (int64_t t = 0; t < T; ++t) {
    const float* g = gate + t * F;
    uint8_t* m = keep + t * F;
    int32_t row_kept = 0;
    for (int64_t i = 0; i < F; ++i) {  // branch-free, so it vectorizes
      const uint8_t on = static_cast<uint8_t>((g[i] > k.above) | ((g[i] > k.lo) & (g[i] < k.hi)));
      m[i] = on;
      any[i] |= on;
      row_kept += on;
    }
    kept += row_kept;
  }
  union_rows.resize(static_cast<size_t>(F));
  int64_t n = 0;
  for (int64_t i = 0; i < F; ++i) {  // branch-free: half the neurons go each way
    union_rows[static_cast<size_t>(n)] = static_cast<int32_t>(i);
    n += any[i];
  }
  union_rows.resize(static_cast<size_t>(n));
  return kept;
}

}  // namespace tessera
