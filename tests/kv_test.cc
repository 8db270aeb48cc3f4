// Property tests of the block pool and KV manager over random operation
// sequences: allocate, append, fork, free, copy-on-write, truncate, and
// prefix-cache hashing. A shadow model records, for every sequence, which
// token each of its positions holds; a fake KV store records what each
// physical slot holds. After every operation: ref counts balance, no block is
// both free and in use, and every sequence reads exactly its own tokens.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kv/block_pool.h"
#include "kv/kv_manager.h"

namespace tessera::kv {
namespace {

struct World {
  KvManager kv;
  int32_t bs;
  std::vector<int32_t> slot_token;             // fake KV memory: token id in each slot
  std::map<int, BlockTable> tables;            // live sequences
  std::map<int, std::vector<int32_t>> shadow;  // what each sequence must read back
  int next_seq = 0;
  int32_t next_token = 1;

  World(int32_t block_size, int32_t num_blocks)
      : kv({block_size, num_blocks}), bs(block_size), slot_token(static_cast<size_t>(num_blocks) * block_size, -1) {}

  void apply(const std::vector<CopyOp>& copies) {
    for (const CopyOp& op : copies) {
      ASSERT_NE(op.src, op.dst);
      for (int32_t i = 0; i < bs; ++i) slot_token[op.dst * bs + i] = slot_token[op.src * bs + i];
    }
  }

  // Grows a sequence by n tokens, writing them like a forward pass would.
  bool append(int id, int n) {
    BlockTable& t = tables[id];
    std::vector<CopyOp> copies;
    const int64_t old = t.num_tokens;
    if (!kv.reserve(t, old + n, copies)) {
      EXPECT_TRUE(copies.empty());
      EXPECT_EQ(t.num_tokens, old) << "failed reserve must change nothing";
      return false;
    }
    apply(copies);
    for (int64_t p = old; p < old + n; ++p) {
      const BlockId b = t.blocks[p / bs];
      EXPECT_EQ(kv.pool().ref_count(b), 1) << "writing into a shared block";
      slot_token[t.slot(p, bs)] = next_token;
      shadow[id].push_back(next_token++);
    }
    return true;
  }

  void check() {
    ASSERT_EQ(kv.pool().check_invariants(), "");
    std::map<BlockId, int32_t> refs;
    for (const auto& [id, t] : tables) {
      ASSERT_EQ(static_cast<int64_t>(shadow[id].size()), t.num_tokens);
      ASSERT_EQ(static_cast<int64_t>(t.blocks.size()), (t.num_tokens + bs - 1) / bs);
      for (BlockId b : t.blocks) {
        ASSERT_GT(b, kNullBlock);
        ++refs[b];
      }
      for (int64_t p = 0; p < t.num_tokens; ++p) {
        ASSERT_EQ(slot_token[t.slot(p, bs)], shadow[id][p]) << "sequence " << id << " position " << p;
      }
    }
    // Every reference is accounted for by a table (nothing else holds blocks here).
    for (BlockId b = 1; b < kv.pool().num_blocks(); ++b) {
      ASSERT_EQ(kv.pool().ref_count(b), refs.count(b) ? refs[b] : 0) << "block " << b;
    }
  }
};

TEST(KvProperty, RandomOperationSequences) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const int32_t bs = 1 + static_cast<int32_t>(rng() % 8);
    World w(bs, 40);
    for (int step = 0; step < 3000; ++step) {
      const int op = static_cast<int>(rng() % 100);
      if (w.tables.empty() || op < 20) {
        const int id = w.next_seq++;
        w.tables[id];
        w.shadow[id];
        if (!w.append(id, 1 + static_cast<int>(rng() % (3 * bs)))) {
          w.tables.erase(id);
          w.shadow.erase(id);
        }
      } else {
        auto it = w.tables.begin();
        std::advance(it, rng() % w.tables.size());
        const int id = it->first;
        if (op < 60) {
          w.append(id, 1 + static_cast<int>(rng() % 4));
        } else if (op < 75) {
          const int child = w.next_seq++;
          w.tables[child] = w.kv.fork(w.tables[id]);
          w.shadow[child] = w.shadow[id];
        } else if (op < 85) {
          const int64_t keep = static_cast<int64_t>(rng() % (w.tables[id].num_tokens + 1));
          w.kv.truncate(w.tables[id], keep);
          w.shadow[id].resize(static_cast<size_t>(keep));
        } else {
          w.kv.free(w.tables[id]);
          w.tables.erase(id);
          w.shadow.erase(id);
        }
      }
      w.check();
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (auto& [id, t] : w.tables) w.kv.free(t);
    w.tables.clear();
    EXPECT_EQ(w.kv.pool().num_free(), 39) << "every block is free once all sequences are gone";
    EXPECT_EQ(w.kv.pool().stats().used, 0);
  }
}

TEST(KvProperty, CachedBlocksSurviveUntilEvictedInLruOrder) {
  BlockPool pool(5, 2);  // 4 usable, 2 tokens per block
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool.allocate_n(4, ids));
  // Four first blocks of four sequences: hash 100 + i, tokens {i, i}.
  const int32_t tokens[4][2] = {{0, 0}, {1, 1}, {2, 2}, {3, 3}};
  auto key = [&](int i) { return BlockKey{static_cast<uint64_t>(100 + i), kNullBlock, 0, tokens[i]}; };
  for (int i = 0; i < 4; ++i) pool.set_hash(ids[i], key(i));
  // Free in the order 2, 0, 3, 1: evictions must follow that order.
  for (int i : {2, 0, 3, 1}) pool.release(ids[i]);
  EXPECT_EQ(pool.stats().cached, 4);
  // A hit takes block 3's contents back off the free list.
  auto hit = pool.lookup_and_retain(key(3));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, ids[3]);
  auto a = pool.allocate();  // evicts the least recently freed: block 2
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, ids[2]);
  EXPECT_FALSE(pool.contains_hash(102));
  EXPECT_TRUE(pool.contains_hash(100));
  auto b = pool.allocate();
  EXPECT_EQ(*b, ids[0]);
  EXPECT_EQ(pool.stats().evictions, 2);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(KvProperty, TruncateIntoAHashedBlockForgetsItsHash) {
  KvManager kv({4, 10});
  BlockTable t;
  std::vector<CopyOp> copies;
  ASSERT_TRUE(kv.reserve(t, 8, copies));
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  kv.pool().set_hash(t.blocks[0], {76, kNullBlock, 0, std::span(tokens).subspan(0, 4)});
  kv.pool().set_hash(t.blocks[1], {77, t.blocks[0], 0, std::span(tokens).subspan(4, 4)});
  ASSERT_TRUE(kv.pool().contains_hash(77));
  kv.truncate(t, 6);  // block 1 becomes partial and will be written again
  EXPECT_FALSE(kv.pool().contains_hash(77));
  kv.free(t);
  EXPECT_EQ(kv.pool().check_invariants(), "");
}

TEST(KvProperty, UtilizationCountsLiveSlots) {
  KvManager kv({16, 100});
  BlockTable a, b;
  std::vector<CopyOp> copies;
  ASSERT_TRUE(kv.reserve(a, 17, copies));  // 2 blocks, 17 live
  ASSERT_TRUE(kv.reserve(b, 32, copies));  // 2 blocks, 32 live
  const KvUsage u = kv.usage();
  EXPECT_EQ(u.allocated_slots, 64);
  EXPECT_EQ(u.live_slots, 49);
  BlockTable c = kv.fork(b);  // shared blocks are counted once
  EXPECT_EQ(kv.usage().live_slots, 49);
  kv.free(a);
  kv.free(b);
  kv.free(c);
  EXPECT_EQ(kv.usage().allocated_slots, 0);
}

}  // namespace
}  // namespace tessera::kv
