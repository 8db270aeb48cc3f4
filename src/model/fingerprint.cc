#include "model/fingerprint.h"

namespace tessera {

kvstore::StoreKey weights_fingerprint(const gguf::File& file) {
  kvstore::Hasher128 h;
  h.update_string("tessera weights v1");
  for (const auto& [key, value] : file.metadata()) {
    h.update_string(key);
    h.update_value(static_cast<int32_t>(value.type));
    h.update_value(value.i);
    h.update_value(value.u);
    h.update_value(value.f);
    h.update_string(value.s);
  }
  for (const gguf::TensorInfo& t : file.tensors()) {
    h.update_string(t.name);
    h.update_value(static_cast<int32_t>(t.type));
    h.update(t.ne, sizeof t.ne);
    if (t.data != nullptr) h.update(t.data, t.n_bytes);
  }
  return h.digest();
}

}  // namespace tessera
