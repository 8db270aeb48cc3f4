// Per-sequence block tables over a BlockPool: growing a sequence, forking it
// (sharing every block), copy-on-write when a shared block is appended to,
// and freeing. Like the pool, it knows nothing about tensors: copies are
// returned as CopyOps for the model runner to carry out before the step.
#pragma once

#include <cstdint>
#include <span>
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
//
// A bounded cache (kv/kv_policy.h) maps its table once it first evicts:
// tokens leave the middle of the sequence, so slot j of the table (block
// j / block_size, offset j % block_size) no longer holds token j. Then
// key_tok[j] is the token index held in slot j and key_pos[j] its
// attention position (its rank among the kept tokens: RoPE positions are
// places in the cache, not in the text), -1 for an empty slot; new tokens
// fill empty slots first, then new blocks. A mapped table never registers
// or matches prefix-cache blocks.
struct BlockTable {
  std::vector<BlockId> blocks;
  int64_t num_tokens = 0;
  int64_t num_dropped = 0;
  std::vector<int32_t> key_pos;  // [blocks.size() * block_size] when mapped, else empty
  std::vector<int64_t> key_tok;  // [blocks.size() * block_size] when mapped, else empty
  int32_t num_live = 0;          // mapped: slots holding a token (also the next token's position)
  bool is_mapped = false;        // once it first evicted (until freed)
  // Scored tables (H2O, SpAtten: kv/kv_policy.h) are mapped from their first
  // token and keep, per slot, the attention mass its key has received
  // (accumulated by the attention kernels through AttentionSeq::key_mass)
  // and, with cascade pruning, the number of layers that still see it
  // (layers [0, key_depth[j])). Both are reset when a slot is filled.
  uint8_t score_depth = 0;        // 0: not scored; else the depth of a new key (the layer count)
  std::vector<int64_t> key_score; // [key_pos.size()] when scored (kernels::kMassOne units)
  std::vector<uint8_t> key_depth; // [key_pos.size()] when scored

  bool mapped() const { return is_mapped; }
  bool scored() const { return score_depth > 0; }
  // Keys held: every reserved token of a dense table.
  int64_t num_keys() const { return mapped() ? num_live : num_tokens; }
  // The slot of token `tok` (reserved, not evicted).
  int64_t slot(int64_t tok, int32_t block_size) const {
    if (mapped()) return mapped_slot(tok, block_size);
    return static_cast<int64_t>(blocks[tok / block_size]) * block_size + tok % block_size;
  }
  // The attention position of token `tok` (its index in a dense table).
  int32_t position(int64_t tok, int32_t block_size) const;

 private:
  int64_t table_index(int64_t tok) const;
  int64_t mapped_slot(int64_t tok, int32_t block_size) const;
};

// Rotate the key held in `slot` (every layer) by `delta` positions: a kept
// key moved from position p to p + delta (delta < 0 when tokens before it
// left the cache).
struct KeyShift {
  int64_t slot;
  int32_t delta;
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

  // Bounded caches: removes the tokens in table slots `evict` (indices into
  // the table's slots, each holding a token) from `t`, which becomes mapped
  // if it was not. The kept keys are renumbered by rank in token order; each
  // whose position changes is listed in `shifts` for the model to rotate,
  // after `copies`: a block held by another sequence (prefix cache, n > 1)
  // that would be rotated is replaced by a private copy first, and a block
  // whose contents change loses its prefix-cache identity. Blocks left
  // empty go back to the pool. All or nothing: false (nothing changed) if
  // the pool is short of blocks for the copies.
  bool evict(BlockTable& t, std::span<const int64_t> evict, std::vector<CopyOp>& copies,
             std::vector<KeyShift>& shifts);

  // Makes the empty table t a mapped one whose next token is `first_token`
  // (the tokens before it are gone): the recompute policy's fresh window.
  void start_at(BlockTable& t, int64_t first_token);

  // Describes a dense table slot by slot (slot j holds token j), as evict()
  // does before its first eviction; scored tables are mapped from the start.
  void map(BlockTable& t);

  // A new table sharing every block of `t` (ref counts +1).
  BlockTable fork(const BlockTable& t);

  // Releases every block of t and empties it.
  void free(BlockTable& t);

  // Live vs allocated token slots over all blocks in use.
  KvUsage usage() const;

 private:
  void note_fill(BlockId id, int32_t filled);
  // Replaces t.blocks[b] by a private copy if it is shared (a CopyOp);
  // whether it was.
  bool copy_if_shared(BlockTable& t, int64_t b, std::vector<CopyOp>& copies);
  // The same, and a block kept loses its prefix-cache identity.
  void make_private(BlockTable& t, int64_t b, std::vector<CopyOp>& copies);
  // Mapped tables: the empty slots reserve() would fill for n new tokens,
  // and the copies filling them would need.
  int32_t mapped_blocks_needed(const BlockTable& t, int64_t n) const;
  bool reserve_mapped(BlockTable& t, int64_t num_tokens, std::vector<CopyOp>& copies);

  int32_t block_size_;
  BlockPool pool_;
  std::vector<int32_t> fill_;  // [num_blocks] token slots in use in each block
};

}  // namespace tessera::kv
