// The lower tiers of the prefix cache, behind one asynchronous front.
//
// RAM (the block pool's prefix cache) is the top tier and lives in the
// engine; this class holds the tiers below it, fastest first (a directory,
// then Redis), and two threads that do all their I/O, so no engine step
// ever waits on a disk or a network — a loader and a writer, each with its
// own connection to every tier, so a load never queues behind a write:
//
//  - prefetch(): a request's blocks past its RAM hit are looked up tier by
//    tier, in order, until the first block that no tier has; each record
//    found is checked (kvstore/block_record.h) and held in memory until the
//    scheduler polls the ticket. A record found in a lower tier is copied
//    into the tiers above it. A record that fails its check is dropped from
//    its tier and counts as absent: its block is computed again.
//  - put(): a block's K/V, copied out of the cache, is queued and written
//    to every tier. The queue is bounded in bytes; past the bound new
//    writes are dropped (counted), never waited for.
//
// A tier that fails (a full disk, a stopped Redis) counts errors and
// answers misses; the others keep working.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvstore/block_store.h"

namespace tessera::kvstore {

struct TierStats {
  std::string tier;   // "disk", "redis"
  std::string where;
  int64_t hits = 0;          // blocks loaded from this tier
  int64_t misses = 0;        // lookups it did not have
  int64_t corrupt = 0;       // records that failed their check (dropped)
  int64_t read_errors = 0;   // lookups it could not answer (I/O, connection)
  int64_t writes = 0;        // records written
  int64_t write_errors = 0;  // records it refused (full disk, connection)
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};

struct KvStoreStats {
  std::vector<TierStats> tiers;
  int64_t prefetches = 0;        // tickets
  int64_t blocks_loaded = 0;     // blocks handed to the scheduler
  int64_t writes_dropped = 0;    // blocks not written: the queue was full
  int64_t queue_bytes = 0;       // bytes waiting to be written
  // Per ticket: from prefetch() until its blocks are ready.
  int64_t loads = 0;
  double load_seconds_sum = 0.0;
  double load_seconds_max = 0.0;
};

struct KvStoreOptions {
  // Bytes of K/V per block (KvCache::bytes_per_block): a record with
  // another size is refused.
  size_t payload_bytes = 0;
  size_t max_queue_bytes = size_t{256} << 20;
  // Loaded blocks' buffers are kept for reuse up to this many bytes.
  size_t max_pool_bytes = size_t{128} << 20;
};

// Buffers for loaded records, recycled: reading into pages already mapped
// is several times cheaper than into fresh ones.
class BufferPool {
 public:
  explicit BufferPool(size_t max_bytes) : max_bytes_(max_bytes) {}
  std::vector<uint8_t> take();  // empty when none is free
  void give(std::vector<uint8_t> b);

 private:
  std::mutex mu_;
  std::vector<std::vector<uint8_t>> free_;
  size_t bytes_ = 0;
  size_t max_bytes_;
};

class TieredStore {
 public:
  using Ticket = uint64_t;
  using Blocks = std::vector<std::shared_ptr<const StoredBlock>>;

  // Opens one set of the tiers (called twice: the loader's and the writer's).
  using TierFactory = std::function<std::vector<std::unique_ptr<BlockStore>>()>;

  TieredStore(const TierFactory& open, KvStoreOptions options);
  // Writes everything queued, then stops the worker.
  ~TieredStore();
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  // Starts loading `refs` (consecutive blocks of one sequence, in order).
  Ticket prefetch(std::vector<BlockRef> refs);
  // nullopt while the ticket is loading; then its blocks (a prefix of its
  // refs, maybe empty), once: the ticket is forgotten.
  std::optional<Blocks> poll(Ticket t);
  // Forgets a ticket (loading stops at the next block).
  void cancel(Ticket t);
  // Waits until some ticket finishes loading, or `timeout`.
  void wait_for_load(std::chrono::microseconds timeout);

  // Whether the block under `key` is stored (this store wrote, queued or
  // loaded it): the engine then does not copy it out again.
  bool known(const StoreKey& key) const;
  // Queues a block for writing to every tier.
  void put(BlockRef ref, std::vector<uint8_t> payload);
  // Waits until every queued write is done (shutdown, tests).
  void flush();

  KvStoreStats stats() const;
  size_t num_tiers() const { return load_tiers_.size(); }

 private:
  struct Load {
    std::vector<BlockRef> refs;
    Blocks blocks;
    bool done = false;
    bool cancelled = false;
    std::chrono::steady_clock::time_point start;
  };
  struct Write {
    BlockRef ref;
    std::vector<uint8_t> payload;
  };
  void run_loads();
  void run_writes();
  void run_load(Ticket t);
  void run_write(Write& w);
  // The checked record of `ref` from the first tier that has one, copied
  // into the tiers above it; nullptr when none has it.
  std::shared_ptr<const StoredBlock> load_one(const BlockRef& ref);
  void warn(size_t tier, const std::string& what);

  // Each touched by its own thread only.
  std::vector<std::unique_ptr<BlockStore>> load_tiers_, write_tiers_;
  KvStoreOptions options_;
  std::shared_ptr<BufferPool> buffers_;  // shared with the blocks handed out

  mutable std::mutex mu_;
  std::condition_variable load_work_cv_, write_work_cv_, load_cv_, idle_cv_;
  std::unordered_map<Ticket, Load> tickets_;
  std::deque<Ticket> load_queue_;
  std::deque<Write> write_queue_;
  bool writing_ = false;
  std::unordered_set<StoreKey, StoreKeyHash> known_;
  Ticket next_ticket_ = 1;
  bool stop_ = false;
  KvStoreStats stats_;
  std::vector<std::chrono::steady_clock::time_point> last_warn_;
  // Last: started once everything above exists.
  std::thread loader_, writer_;
};

// Opens the tiers named by --kv-store values: "redis://HOST:PORT", else a
// directory (bounded by disk_max_bytes; 0: unbounded), fastest first.
// Throws Error on a bad value or a directory that cannot be created.
std::vector<std::unique_ptr<BlockStore>> open_tiers(const std::vector<std::string>& uris, int64_t disk_max_bytes);

}  // namespace tessera::kvstore
