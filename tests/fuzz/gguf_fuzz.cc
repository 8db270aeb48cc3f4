// libFuzzer target for the GGUF reader and the hyperparameter reader.
// (Shape checks of the weights are covered by tests/model_load_test.cc.) Any input must either parse or throw tessera::Error; a
// crash, a sanitizer report, another exception type, or a tensor that is not
// inside the input is a bug. Run it with scripts/fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "format/model_config.h"
#include "format/gguf.h"
#include "kernels/qmoe.h"
#include "kernels/quant.h"
#include "kernels/sparse.h"

namespace {

using tessera::gguf::Array;
using tessera::gguf::Value;

volatile uint64_t g_sink;

void touch(const Array& a) {
  uint64_t h = a.size();
  for (int64_t i : a.ints) h += static_cast<uint64_t>(i);
  for (uint64_t u : a.uints) h += u;
  for (double f : a.floats) h += f == f ? 1 : 2;
  for (const auto& s : a.strings) h += s.empty() ? 0 : static_cast<unsigned char>(s.back());
  for (const Array& sub : a.arrays) touch(sub);
  g_sink = g_sink + h;
}

void touch(const Value& v) {
  g_sink = g_sink + static_cast<uint64_t>(v.i) + v.u + (v.f == v.f ? 1 : 2) + v.s.size();
  if (v.type == tessera::gguf::ValueType::kArray) touch(*v.array);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  try {
    const gguf::File f = gguf::File::parse(data, size, "fuzz.gguf");
    for (const auto& [key, value] : f.metadata()) {
      g_sink = g_sink + key.size();
      touch(value);
    }
    for (const gguf::TensorInfo& t : f.tensors()) {
      // Every tensor lies inside the input (ASan checks the reads too).
      if (t.n_bytes == 0 || t.data < data || t.data > data + size ||
          t.n_bytes > static_cast<size_t>(data + size - t.data)) {
        std::abort();
      }
      g_sink = g_sink + t.data[0] + t.data[t.n_bytes - 1];
      // Block types: any bytes decode to some values, read inside the
      // tensor (a hostile scale or grid index is data, not an address).
      if (tessera::kernels::can_dequantize(t.type) && t.n_dims >= 1 && t.ne[0] > 0 && t.ne[0] <= 4096) {
        const tessera::DTypeTraits tr = tessera::dtype_traits(t.type);
        if (t.ne[0] % tr.block_size == 0 && tessera::row_bytes(t.type, t.ne[0]) <= t.n_bytes) {
          std::vector<float> row(static_cast<size_t>(t.ne[0]));
          tessera::kernels::dequantize_row(t.type, t.data, row.data(), t.ne[0]);
          g_sink = g_sink + static_cast<uint64_t>(row[0] == row[0]);
        }
      }
      // QMoE experts: the layout checks (every codeword walked) must hold
      // whatever the bytes say, and a view they accept reads inside them.
      if (t.type == tessera::DType::kQMoE && t.n_dims == 3) {
        try {
          const tessera::kernels::QmoeView v =
              tessera::kernels::parse_qmoe(t.data, t.n_bytes, t.ne[0], t.ne[1], t.ne[2], t.name.c_str());
          std::vector<float> row(static_cast<size_t>(t.ne[0]));
          if (t.ne[0] <= 4096) tessera::kernels::qmoe_dequantize_row(v, t.ne[2] - 1, t.ne[1] - 1, row.data());
          g_sink = g_sink + v.n_codes + (row.empty() ? 0 : static_cast<uint64_t>(row[0] != 0.0f));
        } catch (const tessera::Error&) {
        }
      }
      // Sparse matrices: the same, every group's stream walked; a view they
      // accept decodes its last row inside the tensor.
      if (tessera::kernels::is_sparse(t.type) && t.n_dims == 2) {
        try {
          const tessera::kernels::SparseView v =
              tessera::kernels::parse_sparse(t.data, t.n_bytes, t.ne[0], t.ne[1], t.name.c_str());
          std::vector<float> row(static_cast<size_t>(t.ne[0]));
          if (t.ne[0] <= 4096) tessera::kernels::sparse_dequantize_row(v, t.ne[1] - 1, row.data());
          g_sink = g_sink + v.kept + (row.empty() ? 0 : static_cast<uint64_t>(row[0] != 0.0f));
        } catch (const tessera::Error&) {
        }
      }
    }
    // Hyperparameters, as load_model() reads them: plain, and with every
    // optional group an architecture may ask for (windows, mixtures of experts).
    if (!f.get_string_or("general.architecture", "").empty()) {
      g_sink = g_sink + static_cast<uint64_t>(read_config(f).n_layer);
      const ModelConfig c = read_config(f, {.sliding_window = true, .moe = true});
      g_sink = g_sink + static_cast<uint64_t>(c.n_expert + c.n_expert_used + c.n_ff_exp + c.n_ff_shexp);
    }
  } catch (const Error&) {
    // The expected outcome for malformed input.
  }
  return 0;
}
