// Per-sequence block tables over a BlockPool: growing a sequence, forking it
// (sharing every block), copy-on-write when a shared block is appended to,
// and freeing. Like the pool, it knows nothing about tensors: copies are
// returned as CopyOps for the model runner to carry out before the step.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_pool.h"

namespace tessera::kv {

struct CacheConfig {
  int32_t block_size = 16;  // tokens per block
  int32_t num_blocks = 0;   // including the null block
};

// Logical -> physical block map of one sequence. Append-only while the
// sequence grows; `num_tokens` counts the token slots reserved so far. With
// a sliding window the leading `num_dropped` entries may be kNullBlock: their
// tokens left every query's window and their blocks went back to the pool.
struct BlockTable {
  std::vector<BlockId> blocks;
  int64_t num_tokens = 0;
  int64_t num_dropped = 0;

  int64_t slot(int64_t pos, int32_t block_size) const {
    return static_cast<int64_t>(blocks[pos / block_size]) * block_size + pos % block_size;
  }
};

// Copy the contents of block `src` into `dst` (all layers, K and V).
struct CopyOp {
  BlockId src;
  BlockId dst;
};

struct KvUsage {
  int64_t live_slots = 0;       // token slots holding a token of some sequence
  int64_t allocated_slots = 0;  // used blocks * block size
  double utilization() const {
    return allocated_slots ? static_cast<double>(live_slots) / static_cast<double>(allocated_slots) : 1.0;
  }
};

class KvManager {
 public:
  explicit KvManager(const CacheConfig& config);

  int32_t block_size() const { return block_size_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // Blocks reserve(t, num_tokens) would take from the pool (new blocks plus
  // copy-on-write copies).
  int32_t blocks_needed(const BlockTable& t, int64_t num_tokens) const;

  // Makes `t` able to hold num_tokens tokens, the new ones written at
  // positions [t.num_tokens, num_tokens). A shared block that will be
  // written is replaced by a private copy (a CopyOp is appended). All or
  // nothing: returns false and changes nothing if the pool is short.
  bool reserve(BlockTable& t, int64_t num_tokens, std::vector<CopyOp>& copies);

  // Shrinks t to num_tokens (dropping whole blocks past it): for discarding
  // rejected speculative tokens or rewinding.
  void truncate(BlockTable& t, int64_t num_tokens);

  // Sliding-window attention: releases the blocks that hold only positions
  // before `first_kept` (no query will read them again) and leaves
  // kNullBlock in their entries. Returns the blocks released.
  int32_t drop_before(BlockTable& t, int64_t first_kept);

  // A new table sharing every block of `t` (ref counts +1).
  BlockTable fork(const BlockTable& t);

  // Releases every block of t and empties it.
  void free(BlockTable& t);

  // Live vs allocated token slots over all blocks in use.
  KvUsage usage() const;

 private:
  void note_fill(BlockId id, int32_t filled);

  int32_t block_size_;
  BlockPool pool_;
  std::vector<int32_t> fill_;  // [num_blocks] token slots in use in each block
};

}  // namespace tessera::kv
