#include "kv/block_pool.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tessera::kv {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size) : block_size_(block_size) {
  TESSERA_CHECK(num_blocks >= 2, kInvalidArgument, "KV pool needs at least 2 blocks, got {}", num_blocks);
  TESSERA_CHECK(block_size >= 1, kInvalidArgument, "block size must be >= 1, got {}", block_size);
  ref_.assign(num_blocks, 0);
  prev_.assign(num_blocks, -1);
  next_.assign(num_blocks, -1);
  in_free_list_.assign(num_blocks, false);
  contents_.assign(num_blocks, Contents{});
  tokens_.assign(static_cast<size_t>(num_blocks) * block_size, 0);
  ref_[kNullBlock] = 1;  // permanently held
  for (BlockId id = 1; id < num_blocks; ++id) push_free_back(id);
}

void BlockPool::push_free_back(BlockId id) {
  prev_[id] = tail_;
  next_[id] = -1;
  if (tail_ >= 0) next_[tail_] = id; else head_ = id;
  tail_ = id;
  in_free_list_[id] = true;
  ++num_free_;
}

void BlockPool::unlink_free(BlockId id) {
  TESSERA_ASSERT(in_free_list_[id]);
  if (prev_[id] >= 0) next_[prev_[id]] = next_[id]; else head_ = next_[id];
  if (next_[id] >= 0) prev_[next_[id]] = prev_[id]; else tail_ = prev_[id];
  prev_[id] = next_[id] = -1;
  in_free_list_[id] = false;
  --num_free_;
}

bool BlockPool::indexed(BlockId id) const {
  if (contents_[id].id == 0) return false;
  auto it = by_hash_.find(contents_[id].hash);
  return it != by_hash_.end() && it->second == id;
}

void BlockPool::drop_hash(BlockId id) {
  if (contents_[id].id == 0) return;
  auto it = by_hash_.find(contents_[id].hash);
  if (it != by_hash_.end() && it->second == id) by_hash_.erase(it);
  contents_[id] = Contents{};
}

std::optional<BlockId> BlockPool::allocate() {
  if (head_ < 0) return std::nullopt;
  const BlockId id = head_;
  unlink_free(id);
  if (contents_[id].id != 0) {
    ++evictions_;
    if (track_evictions_) evicted_.push_back({id, contents_[id].hash});
    drop_hash(id);
  }
  ref_[id] = 1;
  return id;
}

bool BlockPool::allocate_n(int32_t n, std::vector<BlockId>& out) {
  if (n > num_free_) return false;
  for (int32_t i = 0; i < n; ++i) out.push_back(*allocate());
  return true;
}

void BlockPool::retain(BlockId id) {
  TESSERA_ASSERT(id > 0 && id < num_blocks() && ref_[id] > 0);
  ++ref_[id];
}

void BlockPool::release(BlockId id) {
  TESSERA_ASSERT(id > 0 && id < num_blocks() && ref_[id] > 0);
  if (--ref_[id] == 0) {
    // Unindexed contents (a duplicate of an indexed block) only served as a
    // parent for the holder's next blocks; nobody can find them now.
    if (!indexed(id)) drop_hash(id);
    push_free_back(id);
  }
}

std::optional<uint64_t> BlockPool::parent_id(const BlockKey& key) const {
  if (key.parent == kNullBlock) return 0;
  TESSERA_ASSERT(key.parent > 0 && key.parent < num_blocks() && ref_[key.parent] > 0);
  if (contents_[key.parent].id == 0) return std::nullopt;
  return contents_[key.parent].id;
}

bool BlockPool::same_contents(BlockId id, const BlockKey& key, uint64_t parent) const {
  const Contents& c = contents_[id];
  const auto tokens = tokens_of(id);
  return c.id != 0 && c.hash == key.hash && c.parent == parent && c.extra_key == key.extra_key &&
         std::equal(key.tokens.begin(), key.tokens.end(), tokens.begin(), tokens.end());
}

void BlockPool::set_hash(BlockId id, const BlockKey& key) {
  TESSERA_ASSERT(id > 0 && id < num_blocks() && ref_[id] > 0);
  TESSERA_CHECK(static_cast<int64_t>(key.tokens.size()) == block_size_, kInternal,
                "a cached block holds {} tokens, got {}", block_size_, key.tokens.size());
  const std::optional<uint64_t> parent = parent_id(key);
  if (parent && same_contents(id, key, *parent)) return;  // already recorded
  drop_hash(id);
  if (!parent) return;  // nothing to chain to: a lookup could never verify it
  auto it = by_hash_.find(key.hash);
  if (it != by_hash_.end() && same_contents(it->second, key, *parent)) {
    contents_[id] = contents_[it->second];  // the same contents computed twice
  } else {
    if (it != by_hash_.end()) {
      // Other contents under this hash: a collision, or a block computed
      // after an earlier copy of its parent that was evicted since. A block
      // in use keeps the entry; a free one gives it up to the new contents.
      ++hash_conflicts_;
      if (ref_[it->second] > 0) return;
      drop_hash(it->second);
    }
    by_hash_.emplace(key.hash, id);
    contents_[id] = Contents{next_content_id_++, key.hash, *parent, key.extra_key};
  }
  std::copy(key.tokens.begin(), key.tokens.end(), tokens_.begin() + static_cast<ptrdiff_t>(id) * block_size_);
}

std::optional<uint64_t> BlockPool::hash_of(BlockId id) const {
  if (contents_[id].id == 0) return std::nullopt;
  return contents_[id].hash;
}

std::optional<BlockId> BlockPool::lookup_and_retain(const BlockKey& key) {
  TESSERA_CHECK(static_cast<int64_t>(key.tokens.size()) == block_size_, kInternal,
                "a cached block holds {} tokens, got {}", block_size_, key.tokens.size());
  auto it = by_hash_.find(key.hash);
  if (it == by_hash_.end()) return std::nullopt;
  const std::optional<uint64_t> parent = parent_id(key);
  if (!parent) return std::nullopt;
  const BlockId id = it->second;
  if (!same_contents(id, key, *parent)) {
    ++hash_mismatches_;  // same hash, other contents: a miss, never someone else's K/V
    return std::nullopt;
  }
  if (ref_[id] == 0) {
    unlink_free(id);
    ref_[id] = 1;
  } else {
    ++ref_[id];
  }
  return id;
}

std::optional<BlockId> BlockPool::find(const BlockKey& key) const {
  auto it = by_hash_.find(key.hash);
  if (it == by_hash_.end()) return std::nullopt;
  // The parent is the block a previous find() returned: cached, maybe free
  // (nobody holds it), so not parent_id(), which asks that it be held.
  uint64_t parent = 0;
  if (key.parent != kNullBlock) {
    if (key.parent < 0 || key.parent >= num_blocks() || contents_[key.parent].id == 0) return std::nullopt;
    parent = contents_[key.parent].id;
  }
  if (!same_contents(it->second, key, parent)) return std::nullopt;
  return it->second;
}

void BlockPool::clear_hashes() {
  std::fill(contents_.begin(), contents_.end(), Contents{});
  by_hash_.clear();
}

BlockPoolStats BlockPool::stats() const {
  BlockPoolStats s;
  s.total = num_blocks() - 1;
  s.free = num_free_;
  for (BlockId id = 1; id < num_blocks(); ++id) {
    if (ref_[id] > 0) ++s.used;
    if (ref_[id] > 1) ++s.shared;
  }
  s.cached = static_cast<int64_t>(by_hash_.size());
  s.evictions = evictions_;
  s.hash_mismatches = hash_mismatches_;
  s.hash_conflicts = hash_conflicts_;
  return s;
}

std::string BlockPool::check_invariants() const {
  int32_t count = 0;
  BlockId prev = -1;
  for (BlockId id = head_; id >= 0; id = next_[id]) {
    if (prev_[id] != prev) return "free list back-link broken at block " + std::to_string(id);
    if (!in_free_list_[id]) return "block " + std::to_string(id) + " linked but not marked free";
    if (ref_[id] != 0) return "block " + std::to_string(id) + " is free with ref count " + std::to_string(ref_[id]);
    prev = id;
    if (++count > num_blocks()) return "free list has a cycle";
  }
  if (prev != tail_) return "free list tail mismatch";
  if (count != num_free_) return "free count mismatch";
  if (ref_[kNullBlock] != 1 || in_free_list_[kNullBlock]) return "null block disturbed";
  for (BlockId id = 1; id < num_blocks(); ++id) {
    if (ref_[id] < 0) return "negative ref count";
    if ((ref_[id] == 0) != in_free_list_[id]) {
      return "block " + std::to_string(id) + " ref count " + std::to_string(ref_[id]) +
             (in_free_list_[id] ? " but in free list" : " but not in free list");
    }
    const Contents& c = contents_[id];
    if (c.id >= next_content_id_ || c.parent >= next_content_id_) return "block " + std::to_string(id) + " has an unissued content id";
    if (c.id != 0 && ref_[id] == 0 && !indexed(id)) {
      return "free block " + std::to_string(id) + " has contents nobody can find";
    }
  }
  if (contents_[kNullBlock].id != 0) return "null block has contents";
  for (const auto& [h, id] : by_hash_) {
    if (contents_[id].id == 0 || contents_[id].hash != h) return "hash index points at block without that hash";
  }
  return "";
}

}  // namespace tessera::kv
