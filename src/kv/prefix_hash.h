// Content hashes of full KV blocks for automatic prefix caching. A block is
// identified by the hash of (its parent block's hash, an extra key for
// anything else that changes its contents — model, LoRA adapter, prompt
// module —, its token ids), so equal hashes mean equal prefixes up to and
// including the block. xxHash (XXH3, 64-bit) from Debian's libxxhash.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::kv {

uint64_t block_hash(uint64_t parent, uint64_t extra_key, std::span<const int32_t> tokens);

// Appends hashes so `hashes` covers every full block of `tokens`.
void extend_block_hashes(std::vector<uint64_t>& hashes, std::span<const int32_t> tokens,
                         int32_t block_size, uint64_t extra_key);

}  // namespace tessera::kv
