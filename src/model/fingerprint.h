// The identity of a model's weights, stable across processes and machines:
// the global prompt cache (kvstore/) starts every block key from it, so
// blocks computed with other weights, another quantization or another file
// layout never match.
#pragma once

#include "format/gguf.h"
#include "kvstore/block_record.h"

namespace tessera {

// XXH3-128 over every tensor's name, type, shape and bytes, and the file's
// metadata keys with their scalar values. Reads every weight once (a few
// GB/s): computed only when a store is configured.
kvstore::StoreKey weights_fingerprint(const gguf::File& file);

}  // namespace tessera
