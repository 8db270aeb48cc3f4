#include "kv/block_pool.h"

#include <string>

#include "core/error.h"

namespace tessera::kv {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_(num_blocks, 0),
      prev_(num_blocks, -1),
      next_(num_blocks, -1),
      in_free_list_(num_blocks, false),
      hash_(num_blocks) {
  TESSERA_CHECK(num_blocks >= 2, kInvalidArgument, "KV pool needs at least 2 blocks, got {}", num_blocks);
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

void BlockPool::drop_hash(BlockId id) {
  if (!hash_[id]) return;
  auto it = by_hash_.find(*hash_[id]);
  if (it != by_hash_.end() && it->second == id) by_hash_.erase(it);
  hash_[id].reset();
}

std::optional<BlockId> BlockPool::allocate() {
  if (head_ < 0) return std::nullopt;
  const BlockId id = head_;
  unlink_free(id);
  if (hash_[id]) {
    ++evictions_;
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
  if (--ref_[id] == 0) push_free_back(id);
}

void BlockPool::set_hash(BlockId id, uint64_t hash) {
  TESSERA_ASSERT(id > 0 && ref_[id] > 0);
  if (hash_[id] == hash) return;
  drop_hash(id);
  if (by_hash_.count(hash)) return;  // another block already holds these contents
  hash_[id] = hash;
  by_hash_.emplace(hash, id);
}

std::optional<uint64_t> BlockPool::hash_of(BlockId id) const { return hash_[id]; }

std::optional<BlockId> BlockPool::lookup_and_retain(uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const BlockId id = it->second;
  if (ref_[id] == 0) {
    unlink_free(id);
    ref_[id] = 1;
  } else {
    ++ref_[id];
  }
  return id;
}

void BlockPool::clear_hashes() {
  for (BlockId id = 1; id < num_blocks(); ++id) hash_[id].reset();
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
    if (hash_[id]) {
      auto it = by_hash_.find(*hash_[id]);
      if (it == by_hash_.end() || it->second != id) return "hash of block " + std::to_string(id) + " not indexed";
    }
  }
  for (const auto& [h, id] : by_hash_) {
    if (!hash_[id] || *hash_[id] != h) return "hash index points at block without that hash";
  }
  return "";
}

}  // namespace tessera::kv
