// libFuzzer target for tessera quantize's reading of a model (quant/
// quantize_model.cc) on hostile GGUF files: any input must either be
// quantized (RTN, or GPTQ with statistics made up for every linear, into
// Q4_0 at 4 or 3 bits, Q8_0 or F16, padding odd widths) or throw
// tessera::Error; a crash, a sanitizer report or another exception type is
// a bug. The first byte picks the options, the rest is the file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "quant/quantize_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size < 1) return 0;
  const uint8_t pick = data[0];
  static const std::string out = "/tmp/quant_fuzz_" + std::to_string(::getpid()) + ".gguf";
  try {
    const gguf::File f = gguf::File::parse(data + 1, size - 1, "fuzz.gguf");
    quant::QuantizeOptions o;
    // Bits 0, 1 and 6 of the first byte: the storage (index 1: 3-bit values
    // in Q4_0 blocks); bit 2 GPTQ, bit 3 act-order.
    const DType types[] = {DType::kQ4_0, DType::kQ4_0, DType::kQ8_0, DType::kF16,
                           DType::kQ4_K, DType::kQ3_K, DType::kQ4_K, DType::kQ3_K};
    const int kind = (pick & 3) | ((pick >> 4) & 4);
    o.type = types[kind];
    o.bits = kind == 1 ? 3 : 0;
    o.gptq.act_order = (pick & 8) != 0;
    quant::Calibration cal;
    if (pick & 4) {
      o.method = quant::Method::kGptq;
      // Statistics for every linear a file of up to 4 layers can have, as
      // wide as the first matrix (so most do not fit theirs: an error, not
      // a read out of bounds), capped: the fuzzer's files are small.
      for (const gguf::TensorInfo& t : f.tensors()) {
        if (t.n_dims != 2 || t.ne[0] > 256) continue;
        for (const char* tap : {"attn_norm", "attn_out", "ffn_norm", "ffn_act"}) {
          for (int64_t layer = -1; layer < 4; ++layer) {
            quant::InputStats& st = cal.at(layer < 0 ? "result_norm" : tap, layer);
            if (st.dim != 0) continue;
            std::vector<float> x(static_cast<size_t>(t.ne[0]));
            for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7 + static_cast<size_t>(pick)) % 13) - 6.0f;
            st.add(x.data(), 1, t.ne[0], t.ne[0]);
          }
        }
      }
      cal.finish();
    }
    ThreadPool pool(1);
    quant::WholeCalibration stats(cal);
    quant::quantize_model(f, out, o, &stats, pool);
  } catch (const Error&) {
  }
  std::remove(out.c_str());
  return 0;
}
