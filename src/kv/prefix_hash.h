// Content hashes of full KV blocks for automatic prefix caching. A block's
// hash chains (its parent block's hash, an extra key for anything else that
// changes its contents — model, LoRA adapter, prompt module —, its token
// ids), so a request finds the blocks of its longest cached prefix one block
// at a time.
//
// The hash only finds a candidate: BlockPool compares the candidate's tokens,
// extra key and parent block on every hit (block_pool.h), so two different
// blocks with one hash cost a miss, never another request's K/V. It is still
// keyed: XXH3-64 (Debian's libxxhash) with a 192-byte secret drawn from
// std::random_device once per process, so a client who can send prompts
// cannot search offline for token blocks that collide with someone else's
// and squat their index entry. XXH3 with a secret is not a MAC; the
// comparison, not the key, is what keeps requests apart.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace tessera::kv {

// (parent hash, extra key, the block's tokens) -> the block's hash. An empty
// function means block_hash() below; tests inject others (a fixed key, or
// one that makes different blocks collide).
using BlockHashFn = std::function<uint64_t(uint64_t parent, uint64_t extra_key, std::span<const int32_t> tokens)>;

// XXH3-64 keyed with a secret derived from `seed`. The seed makes the secret
// reproducible (tests); the process's own hash uses a random one.
class KeyedBlockHash {
 public:
  explicit KeyedBlockHash(uint64_t seed);
  // A secret from std::random_device.
  static KeyedBlockHash random();

  uint64_t operator()(uint64_t parent, uint64_t extra_key, std::span<const int32_t> tokens) const;

 private:
  KeyedBlockHash() = default;
  alignas(64) unsigned char secret_[192];  // XXH3_SECRET_DEFAULT_SIZE
};

// The hash with this process's random secret (drawn on first use, then fixed
// for the life of the process).
uint64_t block_hash(uint64_t parent, uint64_t extra_key, std::span<const int32_t> tokens);

// Appends hashes so `hashes` covers every full block of `tokens`, hashed with
// `hash` (block_hash when empty).
void extend_block_hashes(std::vector<uint64_t>& hashes, std::span<const int32_t> tokens,
                         int32_t block_size, uint64_t extra_key, const BlockHashFn& hash = {});

}  // namespace tessera::kv
