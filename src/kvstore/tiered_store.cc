#include "kvstore/tiered_store.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "kvstore/disk_store.h"
#include "kvstore/redis_store.h"

namespace tessera::kvstore {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// known_ is a cache of "no need to write this again": bounded, and
// forgetting is harmless (a block is written once more).
constexpr size_t kMaxKnown = size_t{1} << 22;

}  // namespace

std::vector<uint8_t> BufferPool::take() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return {};
  std::vector<uint8_t> b = std::move(free_.back());
  free_.pop_back();
  bytes_ -= b.capacity();
  return b;
}

void BufferPool::give(std::vector<uint8_t> b) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_ + b.capacity() > max_bytes_) return;  // freed
  bytes_ += b.capacity();
  free_.push_back(std::move(b));
}

TieredStore::TieredStore(const TierFactory& open, KvStoreOptions options)
    : load_tiers_(open()),
      write_tiers_(open()),
      options_(options),
      buffers_(std::make_shared<BufferPool>(options.max_pool_bytes)) {
  for (const auto& t : load_tiers_) {
    TierStats s;
    s.tier = t->tier();
    s.where = t->where();
    stats_.tiers.push_back(std::move(s));
  }
  last_warn_.resize(load_tiers_.size());
  loader_ = std::thread([this] { run_loads(); });
  writer_ = std::thread([this] { run_writes(); });
}

TieredStore::~TieredStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& [t, load] : tickets_) load.cancelled = true;
  }
  load_work_cv_.notify_all();
  write_work_cv_.notify_all();
  loader_.join();
  writer_.join();
}

TieredStore::Ticket TieredStore::prefetch(std::vector<BlockRef> refs) {
  std::lock_guard<std::mutex> lock(mu_);
  const Ticket t = next_ticket_++;
  Load& l = tickets_[t];
  l.refs = std::move(refs);
  l.start = std::chrono::steady_clock::now();
  load_queue_.push_back(t);
  ++stats_.prefetches;
  load_work_cv_.notify_one();
  return t;
}

std::optional<TieredStore::Blocks> TieredStore::poll(Ticket t) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tickets_.find(t);
  if (it == tickets_.end()) return Blocks{};
  if (!it->second.done) return std::nullopt;
  Blocks out = std::move(it->second.blocks);
  tickets_.erase(it);
  stats_.blocks_loaded += static_cast<int64_t>(out.size());
  return out;
}

void TieredStore::cancel(Ticket t) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tickets_.find(t);
  if (it == tickets_.end()) return;
  if (it->second.done) {
    tickets_.erase(it);
  } else {
    it->second.cancelled = true;  // the worker erases it
  }
}

void TieredStore::wait_for_load(std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  load_cv_.wait_for(lock, timeout);
}

bool TieredStore::known(const StoreKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return known_.count(key) != 0;
}

void TieredStore::put(BlockRef ref, std::vector<uint8_t> payload) {
  std::lock_guard<std::mutex> lock(mu_);
  if (known_.count(ref.key) != 0) return;
  if (static_cast<size_t>(stats_.queue_bytes) + payload.size() > options_.max_queue_bytes) {
    ++stats_.writes_dropped;
    return;
  }
  if (known_.size() >= kMaxKnown) known_.clear();
  known_.insert(ref.key);
  stats_.queue_bytes += static_cast<int64_t>(payload.size());
  write_queue_.push_back({std::move(ref), std::move(payload)});
  write_work_cv_.notify_one();
}

void TieredStore::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return write_queue_.empty() && !writing_; });
}

KvStoreStats TieredStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void TieredStore::run_loads() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    load_work_cv_.wait(lock, [&] { return stop_ || !load_queue_.empty(); });
    if (load_queue_.empty()) break;  // stopping
    const Ticket t = load_queue_.front();
    load_queue_.pop_front();
    lock.unlock();
    run_load(t);
    lock.lock();
  }
}

void TieredStore::run_writes() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    write_work_cv_.wait(lock, [&] { return stop_ || !write_queue_.empty(); });
    if (write_queue_.empty()) break;  // stopping, everything written
    Write w = std::move(write_queue_.front());
    write_queue_.pop_front();
    writing_ = true;
    lock.unlock();
    run_write(w);
    lock.lock();
    writing_ = false;
    stats_.queue_bytes -= static_cast<int64_t>(w.payload.size());
    if (write_queue_.empty()) idle_cv_.notify_all();
  }
}

void TieredStore::run_load(Ticket t) {
  size_t i = 0;
  for (;;) {
    BlockRef ref;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Load& l = tickets_.at(t);
      if (l.cancelled || i >= l.refs.size()) break;
      ref = l.refs[i];
    }
    std::shared_ptr<const StoredBlock> block = load_one(ref);
    if (!block) break;
    std::lock_guard<std::mutex> lock(mu_);
    tickets_.at(t).blocks.push_back(std::move(block));
    ++i;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Load& l = tickets_.at(t);
    const double s = seconds_since(l.start);
    ++stats_.loads;
    stats_.load_seconds_sum += s;
    stats_.load_seconds_max = std::max(stats_.load_seconds_max, s);
    if (l.cancelled) {
      tickets_.erase(t);
    } else {
      l.done = true;
    }
  }
  load_cv_.notify_all();
}

std::shared_ptr<const StoredBlock> TieredStore::load_one(const BlockRef& ref) {
  // A recycled buffer: its pages are already there (a fresh 600 KB buffer
  // costs more in page faults than reading it does).
  std::vector<uint8_t> bytes = buffers_->take();
  for (size_t i = 0; i < load_tiers_.size(); ++i) {
    BlockStore& tier = *load_tiers_[i];
    if (!tier.get(ref.key, bytes)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (tier.error().empty()) {
        ++stats_.tiers[i].misses;
      } else {
        ++stats_.tiers[i].read_errors;
        warn(i, tier.error());
      }
      continue;
    }
    const std::string why = check_record(bytes, &ref, options_.payload_bytes, tier.checksummed());
    if (!why.empty()) {
      tier.drop(ref.key);
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.tiers[i].corrupt;
      known_.erase(ref.key);
      TESSERA_LOG_WARN("kv-store {}: block {} dropped: {}", tier.where(), ref.key.hex(), why);
      continue;
    }
    // Promote: the tiers above it get a copy for next time.
    for (size_t j = 0; j < i; ++j) {
      const bool ok = load_tiers_[j]->put(ref.key, bytes);
      std::lock_guard<std::mutex> lock(mu_);
      if (ok) {
        ++stats_.tiers[j].writes;
        stats_.tiers[j].bytes_written += static_cast<int64_t>(bytes.size());
      } else {
        ++stats_.tiers[j].write_errors;
        warn(j, load_tiers_[j]->error());
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.tiers[i].hits;
      stats_.tiers[i].bytes_read += static_cast<int64_t>(bytes.size());
      if (known_.size() >= kMaxKnown) known_.clear();
      known_.insert(ref.key);
    }
    // The buffer goes back to the pool when the scheduler drops the block.
    std::shared_ptr<BufferPool> pool = buffers_;
    auto* block = new StoredBlock{ref.key, std::move(bytes), record_payload_offset(ref.tokens.size())};
    return std::shared_ptr<const StoredBlock>(block, [pool](const StoredBlock* b) {
      pool->give(std::move(const_cast<StoredBlock*>(b)->bytes));
      delete b;
    });
  }
  buffers_->give(std::move(bytes));
  return nullptr;
}

void TieredStore::run_write(Write& w) {
  const std::vector<uint8_t> record = encode_record(w.ref, w.payload);
  for (size_t i = 0; i < write_tiers_.size(); ++i) {
    const bool ok = write_tiers_[i]->put(w.ref.key, record);
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) {
      ++stats_.tiers[i].writes;
      stats_.tiers[i].bytes_written += static_cast<int64_t>(record.size());
    } else {
      ++stats_.tiers[i].write_errors;
      warn(i, write_tiers_[i]->error());
    }
  }
}

void TieredStore::warn(size_t tier, const std::string& what) {
  // Called with mu_ held. A failing tier fails every call: one line per
  // ten seconds is enough.
  const auto now = std::chrono::steady_clock::now();
  if (now - last_warn_[tier] < std::chrono::seconds(10)) return;
  last_warn_[tier] = now;
  TESSERA_LOG_WARN("kv-store: {} (requests go on without this tier)", what);
}

std::vector<std::unique_ptr<BlockStore>> open_tiers(const std::vector<std::string>& uris, int64_t disk_max_bytes) {
  std::vector<std::unique_ptr<BlockStore>> tiers;
  for (const std::string& uri : uris) {
    std::string host;
    int port = 0;
    if (parse_redis_uri(uri, host, port)) {
      tiers.push_back(std::make_unique<RedisStore>(host, port));
    } else {
      TESSERA_CHECK(uri.find("://") == std::string::npos, kInvalidArgument,
                    "--kv-store {}: not a directory nor redis://HOST:PORT", uri);
      tiers.push_back(std::make_unique<DiskStore>(uri, disk_max_bytes));
    }
  }
  // Fastest first: local directories before Redis.
  std::stable_sort(tiers.begin(), tiers.end(), [](const auto& a, const auto& b) {
    return std::string_view(a->tier()) == "disk" && std::string_view(b->tier()) != "disk";
  });
  return tiers;
}

}  // namespace tessera::kvstore
