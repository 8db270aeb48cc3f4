// The pool of KV-cache blocks: which physical blocks are free, who holds
// them, and (for prefix caching) which full blocks have known contents.
//
// Knows nothing about tensors: a block is an index into KV memory that the
// model owns. Block 0 is the null block: never handed out, used as a
// placeholder in block tables.
//
// Free blocks sit in one list in eviction order (least recently freed
// first). A freed block that carries a content hash stays findable by that
// hash until it is reused, so a later request with the same prefix can take
// it back (automatic prefix caching); allocation takes from the front, so
// the blocks freed longest ago are evicted first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera::kv {

using BlockId = int32_t;
constexpr BlockId kNullBlock = 0;

struct BlockPoolStats {
  int64_t total = 0;   // usable blocks (the null block excluded)
  int64_t used = 0;    // ref count > 0
  int64_t shared = 0;  // ref count > 1
  int64_t free = 0;    // ref count == 0 (cached or not)
  int64_t cached = 0;  // free or used blocks with a content hash
  int64_t evictions = 0;  // cached blocks whose contents were dropped for reuse
};

class BlockPool {
 public:
  // num_blocks includes the null block, so num_blocks - 1 are usable.
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t num_free() const { return num_free_; }

  // Takes a free block (ref count 1), evicting its cached contents if any.
  // nullopt when none is free.
  std::optional<BlockId> allocate();
  // Takes n blocks or none.
  bool allocate_n(int32_t n, std::vector<BlockId>& out);

  // Ref counting. release() of the last reference returns the block to the
  // free list (at the back); its hash, if any, keeps it findable.
  void retain(BlockId id);
  void release(BlockId id);
  int32_t ref_count(BlockId id) const { return ref_[id]; }

  // --- prefix cache ---------------------------------------------------------
  // Marks a full block's contents as identified by `hash` (it must be held).
  // A block already registered under the same hash keeps the entry.
  void set_hash(BlockId id, uint64_t hash);
  std::optional<uint64_t> hash_of(BlockId id) const;
  // The block holding contents `hash`, retained for the caller (taken off
  // the free list if it was free), or nullopt.
  std::optional<BlockId> lookup_and_retain(uint64_t hash);
  // Whether a block with these contents exists (no side effects).
  bool contains_hash(uint64_t hash) const { return by_hash_.count(hash) != 0; }
  // Forgets the contents hash of one block (its contents are about to change).
  void clear_hash(BlockId id) { drop_hash(id); }
  // Drops every cached hash (e.g. on adapter change); used blocks unaffected.
  void clear_hashes();

  BlockPoolStats stats() const;

  // Checks every internal invariant (free list <-> ref counts, hash maps);
  // returns a description of the first violation or "" (tests call it).
  std::string check_invariants() const;

 private:
  void unlink_free(BlockId id);
  void push_free_back(BlockId id);
  void drop_hash(BlockId id);

  std::vector<int32_t> ref_;      // [num_blocks]
  // Intrusive doubly linked free list over block ids; -1 terminates.
  std::vector<BlockId> prev_, next_;
  std::vector<bool> in_free_list_;
  BlockId head_ = -1, tail_ = -1;
  int32_t num_free_ = 0;
  std::vector<std::optional<uint64_t>> hash_;   // [num_blocks]
  std::unordered_map<uint64_t, BlockId> by_hash_;
  int64_t evictions_ = 0;
};

}  // namespace tessera::kv
