#include "kv/kv_manager.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::kv {

KvManager::KvManager(const CacheConfig& config)
    : block_size_(config.block_size), pool_(config.num_blocks, config.block_size), fill_(config.num_blocks, 0) {
  TESSERA_CHECK(config.block_size >= 1, kInvalidArgument, "block size must be >= 1, got {}", config.block_size);
}

int64_t BlockTable::table_index(int64_t tok) const {
  // New tokens are looked up: they sit in the last slots filled, often near the end.
  for (int64_t j = static_cast<int64_t>(key_tok.size()) - 1; j >= 0; --j) {
    if (key_tok[j] == tok) return j;
  }
  TESSERA_ASSERT(false && "token not in the table");
  return 0;
}

int64_t BlockTable::mapped_slot(int64_t tok, int32_t block_size) const {
  const int64_t j = table_index(tok);
  return static_cast<int64_t>(blocks[j / block_size]) * block_size + j % block_size;
}

int32_t BlockTable::position(int64_t tok, int32_t) const {
  return mapped() ? key_pos[table_index(tok)] : static_cast<int32_t>(tok);
}

int32_t KvManager::blocks_needed(const BlockTable& t, int64_t num_tokens) const {
  if (num_tokens <= t.num_tokens) return 0;
  if (t.mapped()) return mapped_blocks_needed(t, num_tokens - t.num_tokens);
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

int32_t KvManager::mapped_blocks_needed(const BlockTable& t, int64_t n) const {
  int64_t empty = 0;
  int32_t copies = 0;
  int64_t last_counted = -1;
  for (int64_t j = 0; j < static_cast<int64_t>(t.key_pos.size()) && empty < n; ++j) {
    if (t.key_pos[j] >= 0) continue;
    ++empty;
    const int64_t b = j / block_size_;
    if (b != last_counted && pool_.ref_count(t.blocks[b]) > 1) ++copies;
    last_counted = b;
  }
  return copies + static_cast<int32_t>((n - empty + block_size_ - 1) / block_size_);
}

bool KvManager::copy_if_shared(BlockTable& t, int64_t b, std::vector<CopyOp>& copies) {
  const BlockId old = t.blocks[b];
  if (pool_.ref_count(old) <= 1) return false;
  const BlockId fresh = *pool_.allocate();
  copies.push_back({old, fresh});
  fill_[fresh] = fill_[old];
  pool_.release(old);
  t.blocks[b] = fresh;
  return true;
}

void KvManager::make_private(BlockTable& t, int64_t b, std::vector<CopyOp>& copies) {
  if (!copy_if_shared(t, b, copies)) pool_.clear_hash(t.blocks[b]);  // its contents are about to change
}

bool KvManager::reserve_mapped(BlockTable& t, int64_t num_tokens, std::vector<CopyOp>& copies) {
  const int64_t n = num_tokens - t.num_tokens;
  if (mapped_blocks_needed(t, n) > pool_.num_free()) return false;
  int64_t tok = t.num_tokens;
  int64_t last_private = -1;
  for (int64_t j = 0; j < static_cast<int64_t>(t.key_pos.size()) && tok < num_tokens; ++j) {
    if (t.key_pos[j] >= 0) continue;
    if (j / block_size_ != last_private) make_private(t, j / block_size_, copies);
    last_private = j / block_size_;
    t.key_tok[j] = tok++;
    t.key_pos[j] = t.num_live++;
    if (t.scored()) {
      t.key_score[j] = 0;
      t.key_depth[j] = t.score_depth;
    }
  }
  while (tok < num_tokens) {
    const BlockId id = *pool_.allocate();
    fill_[id] = block_size_;
    t.blocks.push_back(id);
    for (int32_t o = 0; o < block_size_; ++o) {
      const bool used = tok < num_tokens;
      t.key_tok.push_back(used ? tok++ : -1);
      t.key_pos.push_back(used ? t.num_live++ : -1);
      if (t.scored()) {
        t.key_score.push_back(0);
        t.key_depth.push_back(t.score_depth);
      }
    }
  }
  t.num_tokens = num_tokens;
  return true;
}

void KvManager::start_at(BlockTable& t, int64_t first_token) {
  TESSERA_ASSERT(t.blocks.empty() && t.num_tokens == 0);
  t.num_tokens = first_token;
  t.num_live = 0;
  t.is_mapped = true;
}

void KvManager::map(BlockTable& t) {
  if (t.mapped()) return;
  // The same contents, described slot by slot: slot j holds token j.
  TESSERA_ASSERT(t.num_dropped == 0);
  const size_t n_slots = t.blocks.size() * static_cast<size_t>(block_size_);
  t.key_pos.assign(n_slots, -1);
  t.key_tok.assign(n_slots, -1);
  for (int64_t j = 0; j < t.num_tokens; ++j) {
    t.key_pos[j] = static_cast<int32_t>(j);
    t.key_tok[j] = j;
  }
  if (t.scored()) {
    t.key_score.assign(n_slots, 0);
    t.key_depth.assign(n_slots, t.score_depth);
  }
  t.num_live = static_cast<int32_t>(t.num_tokens);
  t.is_mapped = true;
}

bool KvManager::evict(BlockTable& t, std::span<const int64_t> evict, std::vector<CopyOp>& copies,
                      std::vector<KeyShift>& shifts) {
  const int64_t bs = block_size_;
  map(t);
  std::vector<uint8_t> gone(t.key_pos.size(), 0);
  for (int64_t j : evict) {
    TESSERA_ASSERT(t.key_pos[j] >= 0);
    gone[j] = 1;
  }
  // Kept slots in token order; a key's new position is its rank.
  std::vector<int64_t> kept;
  for (int64_t j = 0; j < static_cast<int64_t>(t.key_pos.size()); ++j) {
    if (t.key_pos[j] >= 0 && !gone[j]) kept.push_back(j);
  }
  std::sort(kept.begin(), kept.end(), [&](int64_t a, int64_t b) { return t.key_tok[a] < t.key_tok[b]; });
  std::vector<uint8_t> rotated(t.blocks.size(), 0);
  int32_t need = 0;
  for (size_t r = 0; r < kept.size(); ++r) {
    const int64_t b = kept[r] / bs;
    if (t.key_pos[kept[r]] != static_cast<int32_t>(r) && !rotated[b]) {
      rotated[b] = 1;
      need += pool_.ref_count(t.blocks[b]) > 1 ? 1 : 0;
    }
  }
  if (need > pool_.num_free()) return false;
  for (int64_t b = 0; b < static_cast<int64_t>(t.blocks.size()); ++b) {
    if (rotated[b]) make_private(t, b, copies);
  }
  for (size_t r = 0; r < kept.size(); ++r) {
    const int64_t j = kept[r];
    const int32_t delta = static_cast<int32_t>(r) - t.key_pos[j];
    if (delta != 0) shifts.push_back({static_cast<int64_t>(t.blocks[j / bs]) * bs + j % bs, delta});
    t.key_pos[j] = static_cast<int32_t>(r);
  }
  for (int64_t j : evict) {
    t.key_pos[j] = -1;
    t.key_tok[j] = -1;
    if (t.scored()) t.key_score[j] = 0;
  }
  t.num_live = static_cast<int32_t>(kept.size());
  // Blocks left empty go back to the pool; the table closes up over them
  // (the other slots keep their blocks, so the shifts' slots stay valid).
  for (int64_t b = static_cast<int64_t>(t.blocks.size()) - 1; b >= 0; --b) {
    const auto first = t.key_pos.begin() + b * bs;
    if (std::any_of(first, first + bs, [](int32_t p) { return p >= 0; })) continue;
    if (t.blocks[b] != kNullBlock) pool_.release(t.blocks[b]);
    t.blocks.erase(t.blocks.begin() + b);
    t.key_pos.erase(first, first + bs);
    t.key_tok.erase(t.key_tok.begin() + b * bs, t.key_tok.begin() + (b + 1) * bs);
    if (t.scored()) {
      t.key_score.erase(t.key_score.begin() + b * bs, t.key_score.begin() + (b + 1) * bs);
      t.key_depth.erase(t.key_depth.begin() + b * bs, t.key_depth.begin() + (b + 1) * bs);
    }
  }
  return true;
}

bool KvManager::reserve(BlockTable& t, int64_t num_tokens, std::vector<CopyOp>& copies) {
  if (num_tokens <= t.num_tokens) return true;
  if (t.scored()) map(t);
  if (t.mapped()) return reserve_mapped(t, num_tokens, copies);
  const int32_t need = blocks_needed(t, num_tokens);
  if (need > pool_.num_free()) return false;
  if (t.num_tokens % block_size_ != 0) {
    const int64_t idx = t.num_tokens / block_size_;
    TESSERA_ASSERT(t.blocks[idx] != kNullBlock);  // a window never drops the block being written
    copy_if_shared(t, idx, copies);
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
  if (t.mapped()) {
    // The tokens past num_tokens hold the highest positions: emptying their
    // slots leaves the others' ranks as they are.
    for (size_t j = 0; j < t.key_tok.size(); ++j) {
      if (t.key_tok[j] < num_tokens) continue;
      if (t.key_pos[j] >= 0) --t.num_live;
      t.key_tok[j] = -1;
      t.key_pos[j] = -1;
      if (t.scored()) t.key_score[j] = 0;
    }
    t.num_tokens = num_tokens;
    return;
  }
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
  if (t.mapped()) return 0;  // a bounded cache evicts by its own policy
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
  t.key_pos.clear();
  t.key_tok.clear();
  t.key_score.clear();
  t.key_depth.clear();
  t.num_live = 0;
  t.is_mapped = false;
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
