// The pool of KV-cache blocks: which physical blocks are free, who holds
// them, and (for prefix caching) which full blocks have known contents.
//
// Knows nothing about tensors: a block is an index into KV memory that the
// model owns. Block 0 is the null block: never handed out, used as a
// placeholder in block tables.
//
// Free blocks sit in one list in eviction order (least recently freed
// first). A freed block with recorded contents stays findable by its content
// hash until it is reused, so a later request with the same prefix can take
// it back (automatic prefix caching); allocation takes from the front, so
// the blocks freed longest ago are evicted first.
//
// The hash is never trusted alone (issue 13.6: a client who finds token
// blocks colliding with another user's must not make that user attend to
// its K/V). The pool records, for each registered block, everything that
// makes two blocks' K/V equal — its tokens, the extra key (model, adapter,
// prompt modules) and the contents of the block before it — and a lookup
// compares all of it: a block found under the hash with other contents is a
// miss (counted in BlockPoolStats::hash_mismatches), and the request
// computes its own K/V.
//
// "The block before it" is compared by content id, not by hash: each
// distinct registered contents gets a number never reused in the pool's
// life, and a block records its parent's number. A hit on block b requires
// that its recorded parent id is the id of the block the same lookup found
// for b - 1, so equality holds for the whole prefix by induction, whatever
// the hash does. A block registered with contents equal to an indexed one
// (two requests computed the same prefix at once) shares that block's id.
// The price: a cached block whose parent was evicted and computed again
// since no longer matches (the new parent is new contents to the pool); the
// request recomputes it once and its registration takes the entry over.
// Recorded tokens cost 4 bytes per token slot, next to the K/V's hundreds.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
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
  // Lookups that found a block under the hash whose contents differ, served
  // as misses: a hash collision, or a block whose parent was evicted and
  // computed again since (equal tokens, another identity).
  int64_t hash_mismatches = 0;
  // Registrations that found a block with other contents under the hash
  // (same causes): a free one is replaced, a held one kept.
  int64_t hash_conflicts = 0;
};

// What a full block holds, for registering and looking it up. `hash` (from
// prefix_hash.h) finds the candidate; the rest is compared.
struct BlockKey {
  uint64_t hash = 0;
  // The block before it in the sequence, held by the caller; kNullBlock for
  // a sequence's first block. Compared by its content id.
  BlockId parent = kNullBlock;
  uint64_t extra_key = 0;
  std::span<const int32_t> tokens;  // [block_size]
};

class BlockPool {
 public:
  // num_blocks includes the null block, so num_blocks - 1 are usable;
  // block_size tokens per block (the tokens recorded per cached block).
  BlockPool(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t num_free() const { return num_free_; }

  // Takes a free block (ref count 1), evicting its cached contents if any.
  // nullopt when none is free.
  std::optional<BlockId> allocate();
  // Takes n blocks or none.
  bool allocate_n(int32_t n, std::vector<BlockId>& out);

  // Ref counting. release() of the last reference returns the block to the
  // free list (at the back); its hash, if it is indexed, keeps it findable.
  void retain(BlockId id);
  void release(BlockId id);
  int32_t ref_count(BlockId id) const { return ref_[id]; }

  // --- prefix cache ---------------------------------------------------------
  // Records a full block's contents (the block must be held) and indexes it
  // under key.hash. If a block with equal contents is indexed there, it
  // keeps the entry and the new block shares its content id. If one with
  // other contents is (hash_conflicts), a free one gives the entry up and a
  // held one keeps it, the new block then staying unregistered. Nothing is
  // recorded when key.parent has no recorded contents.
  void set_hash(BlockId id, const BlockKey& key);
  // The hash of a block's recorded contents, indexed or not.
  std::optional<uint64_t> hash_of(BlockId id) const;
  // The block indexed under key.hash if its contents equal `key`, retained
  // for the caller (taken off the free list if it was free), or nullopt.
  std::optional<BlockId> lookup_and_retain(const BlockKey& key);
  // The block lookup_and_retain would return, without taking it. A chain
  // of finds (each key's parent the block found before) walks a prefix.
  std::optional<BlockId> find(const BlockKey& key) const;
  // Whether some block is indexed under this hash (no side effects).
  bool contains_hash(uint64_t hash) const { return by_hash_.count(hash) != 0; }
  // Forgets the recorded contents of one block (they are about to change).
  void clear_hash(BlockId id) { drop_hash(id); }
  // Drops every cached hash (e.g. on adapter change); used blocks unaffected.
  void clear_hashes();

  BlockPoolStats stats() const;

  // With tracking on, allocate() lists each block whose cached contents it
  // evicts, with the hash of those contents (the global prompt cache's
  // write-back copies them out before they are overwritten); take_evicted()
  // hands the list over.
  struct Evicted {
    BlockId id;
    uint64_t hash;
  };
  void track_evictions(bool on) { track_evictions_ = on; }
  std::vector<Evicted> take_evicted() { return std::move(evicted_); }

  // Checks every internal invariant (free list <-> ref counts, hash maps);
  // returns a description of the first violation or "" (tests call it).
  std::string check_invariants() const;

 private:
  void unlink_free(BlockId id);
  void push_free_back(BlockId id);
  void drop_hash(BlockId id);
  bool indexed(BlockId id) const;  // by_hash_ finds this block under its hash
  // Content id of a key's parent: 0 for kNullBlock, nullopt when the parent
  // has no recorded contents.
  std::optional<uint64_t> parent_id(const BlockKey& key) const;
  bool same_contents(BlockId id, const BlockKey& key, uint64_t parent) const;
  std::span<const int32_t> tokens_of(BlockId id) const {
    return {tokens_.data() + static_cast<size_t>(id) * block_size_, static_cast<size_t>(block_size_)};
  }

  // Recorded contents of a block; id 0 means none.
  struct Contents {
    uint64_t id = 0;      // content id, unique per distinct contents
    uint64_t hash = 0;
    uint64_t parent = 0;  // content id of the block before it, 0 for a first block
    uint64_t extra_key = 0;
  };

  int32_t block_size_;
  std::vector<int32_t> ref_;      // [num_blocks]
  // Intrusive doubly linked free list over block ids; -1 terminates.
  std::vector<BlockId> prev_, next_;
  std::vector<bool> in_free_list_;
  BlockId head_ = -1, tail_ = -1;
  int32_t num_free_ = 0;
  std::vector<Contents> contents_;  // [num_blocks]
  std::vector<int32_t> tokens_;     // [num_blocks * block_size] tokens of blocks with contents
  std::unordered_map<uint64_t, BlockId> by_hash_;
  uint64_t next_content_id_ = 1;
  int64_t evictions_ = 0;
  int64_t hash_mismatches_ = 0;
  int64_t hash_conflicts_ = 0;
  bool track_evictions_ = false;
  std::vector<Evicted> evicted_;
};

}  // namespace tessera::kv
