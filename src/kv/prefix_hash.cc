#include "kv/prefix_hash.h"

// The streaming state and the secret generators need the static-linking
// declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <random>

namespace tessera::kv {

static_assert(sizeof(KeyedBlockHash) >= XXH3_SECRET_DEFAULT_SIZE);

KeyedBlockHash::KeyedBlockHash(uint64_t seed) { XXH3_generateSecret_fromSeed(secret_, seed); }

KeyedBlockHash KeyedBlockHash::random() {
  // 256 bits of entropy, spread over the whole secret by XXH3_generateSecret
  // (a secret must look random in every byte, which raw seed bytes need not).
  std::random_device rd;
  uint32_t entropy[8];
  for (uint32_t& e : entropy) e = rd();
  KeyedBlockHash h;
  XXH3_generateSecret(h.secret_, sizeof h.secret_, entropy, sizeof entropy);
  return h;
}

uint64_t KeyedBlockHash::operator()(uint64_t parent, uint64_t extra_key, std::span<const int32_t> tokens) const {
  XXH3_state_t state;
  XXH3_64bits_reset_withSecret(&state, secret_, sizeof secret_);
  XXH3_64bits_update(&state, &parent, sizeof parent);
  XXH3_64bits_update(&state, &extra_key, sizeof extra_key);
  XXH3_64bits_update(&state, tokens.data(), tokens.size_bytes());
  return XXH3_64bits_digest(&state);
}

uint64_t block_hash(uint64_t parent, uint64_t extra_key, std::span<const int32_t> tokens) {
  static const KeyedBlockHash process_hash = KeyedBlockHash::random();
  return process_hash(parent, extra_key, tokens);
}

void extend_block_hashes(std::vector<uint64_t>& hashes, std::span<const int32_t> tokens,
                         int32_t block_size, uint64_t extra_key, const BlockHashFn& hash) {
  const size_t full = tokens.size() / static_cast<size_t>(block_size);
  while (hashes.size() < full) {
    const size_t b = hashes.size();
    const uint64_t parent = b == 0 ? 0 : hashes[b - 1];
    const auto block = tokens.subspan(b * block_size, block_size);
    hashes.push_back(hash ? hash(parent, extra_key, block) : block_hash(parent, extra_key, block));
  }
}

}  // namespace tessera::kv
