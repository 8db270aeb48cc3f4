#include "kv/prefix_hash.h"

// The streaming state on the stack needs the static-linking declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstring>

namespace tessera::kv {

uint64_t block_hash(uint64_t parent, uint64_t extra_key, std::span<const int32_t> tokens) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, &parent, sizeof parent);
  XXH3_64bits_update(&state, &extra_key, sizeof extra_key);
  XXH3_64bits_update(&state, tokens.data(), tokens.size_bytes());
  return XXH3_64bits_digest(&state);
}

void extend_block_hashes(std::vector<uint64_t>& hashes, std::span<const int32_t> tokens,
                         int32_t block_size, uint64_t extra_key) {
  const size_t full = tokens.size() / static_cast<size_t>(block_size);
  while (hashes.size() < full) {
    const size_t b = hashes.size();
    const uint64_t parent = b == 0 ? 0 : hashes[b - 1];
    hashes.push_back(block_hash(parent, extra_key, tokens.subspan(b * block_size, block_size)));
  }
}

}  // namespace tessera::kv
