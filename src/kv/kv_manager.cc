#include "kv/kv_manager.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::kv {

KvManager::KvManager(const CacheConfig& config)
    : block_size_(config.block_size), pool_(config.num_blocks, config.block_size), fill_(config.num_blocks, 0) {
  TESSERA_CHECK(config.block_size >= 1, kInvalidArgument, "block size must be >= 1, got {}", config.block_size);
}

int32_t KvManager::blocks_needed(const BlockTable& t, int64_t num_tokens) const {
  if (num_tokens <= t.num_tokens) return 0;
  const int64_t have = static_cast<int64_t>(t.blocks.size());
  const int64_t want = (num_tokens + block_size_ - 1) / block_size_;
  int32_t n = static_cast<int32_t>(std::max<int64_t>(0, want - have));
  // The partially filled last block gets written: if shared, it is copied.
  if (t.num_tokens % block_size_ != 0) {
    const BlockId last = t.blocks[t.num_tokens / block_size_];
    if (last != kNullBlock && pool_.ref_count(last) > 1) ++n;
  }
  return n;
}

bool KvManager::reserve(BlockTable& t, int64_t num_tokens, std::vector<CopyOp>& copies) {
  if (num_tokens <= t.num_tokens) return true;
  const int32_t need = blocks_needed(t, num_tokens);
  if (need > pool_.num_free()) return false;
  if (t.num_tokens % block_size_ != 0) {
    const int64_t idx = t.num_tokens / block_size_;
    const BlockId old = t.blocks[idx];
    TESSERA_ASSERT(old != kNullBlock);  // a window never drops the block being written
    if (pool_.ref_count(old) > 1) {
      const BlockId fresh = *pool_.allocate();
      copies.push_back({old, fresh});
      fill_[fresh] = fill_[old];
      pool_.release(old);
      t.blocks[idx] = fresh;
    }
  }
  const int64_t want = (num_tokens + block_size_ - 1) / block_size_;
  while (static_cast<int64_t>(t.blocks.size()) < want) {
    const BlockId id = *pool_.allocate();
    fill_[id] = 0;
    t.blocks.push_back(id);
  }
  for (int64_t b = t.num_tokens / block_size_; b < want; ++b) {
    const int64_t end = std::min<int64_t>(num_tokens, (b + 1) * block_size_);
    note_fill(t.blocks[b], static_cast<int32_t>(end - b * block_size_));
  }
  t.num_tokens = num_tokens;
  return true;
}

void KvManager::note_fill(BlockId id, int32_t filled) { fill_[id] = std::max(fill_[id], filled); }

void KvManager::truncate(BlockTable& t, int64_t num_tokens) {
  if (num_tokens >= t.num_tokens) return;
  const int64_t keep = (num_tokens + block_size_ - 1) / block_size_;
  while (static_cast<int64_t>(t.blocks.size()) > keep) {
    if (t.blocks.back() != kNullBlock) pool_.release(t.blocks.back());
    t.blocks.pop_back();
  }
  t.num_tokens = num_tokens;
  t.num_dropped = std::min<int64_t>(t.num_dropped, keep);
  if (num_tokens % block_size_ != 0 && t.blocks.back() != kNullBlock && pool_.ref_count(t.blocks.back()) == 1) {
    // The block is partial again and will be written: its cached identity
    // no longer describes it.
    pool_.clear_hash(t.blocks.back());
    fill_[t.blocks.back()] = static_cast<int32_t>(num_tokens % block_size_);
  }
}

int32_t KvManager::drop_before(BlockTable& t, int64_t first_kept) {
  const int64_t upto = std::min<int64_t>(first_kept / block_size_, static_cast<int64_t>(t.blocks.size()));
  int32_t released = 0;
  for (int64_t b = t.num_dropped; b < upto; ++b) {
    if (t.blocks[b] == kNullBlock) continue;
    pool_.release(t.blocks[b]);
    t.blocks[b] = kNullBlock;
    ++released;
  }
  t.num_dropped = std::max(t.num_dropped, upto);
  return released;
}

BlockTable KvManager::fork(const BlockTable& t) {
  for (BlockId id : t.blocks) {
    if (id != kNullBlock) pool_.retain(id);
  }
  return t;
}

void KvManager::free(BlockTable& t) {
  for (BlockId id : t.blocks) {
    if (id != kNullBlock) pool_.release(id);
  }
  t.blocks.clear();
  t.num_tokens = 0;
  t.num_dropped = 0;
}

KvUsage KvManager::usage() const {
  KvUsage u;
  for (BlockId id = 1; id < pool_.num_blocks(); ++id) {
    if (pool_.ref_count(id) == 0) continue;
    u.live_slots += fill_[id];
    u.allocated_slots += block_size_;
  }
  return u;
}

}  // namespace tessera::kv
