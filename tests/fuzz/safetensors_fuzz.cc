// libFuzzer target for the safetensors header parser (format/safetensors.h).
// Any input must either parse or throw tessera::Error; a crash, a sanitizer
// report, another exception type, or a tensor that is not inside the input
// (or whose size does not match its shape and dtype) is a bug.
// tests/hf_model_test.cc runs the same property on truncations and byte
// flips of a valid file in every unit-test run.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  try {
    const safetensors::File f = safetensors::File::parse(data, size, "fuzz.safetensors");
    for (const safetensors::Tensor& t : f.tensors()) {
      if (t.data < data || t.data > data + size || t.n_bytes > static_cast<size_t>(data + size - t.data) ||
          t.n_bytes != static_cast<size_t>(t.n_elements()) * safetensors::dtype_size(t.dtype)) {
        std::abort();
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
