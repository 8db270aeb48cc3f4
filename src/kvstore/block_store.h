// One lower tier of the global prompt cache: a place that keeps records
// (kvstore/block_record.h) by key. Implementations: a local directory
// (disk_store.h) and Redis (redis_store.h). Called from one thread (the
// tiered store's worker), so implementations need no locking of their own;
// two processes may share one tier (a directory or a Redis server) and
// each record is written whole or not at all.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/block_record.h"

namespace tessera::kvstore {

class BlockStore {
 public:
  virtual ~BlockStore() = default;
  // "disk", "redis": the tier's label in metrics.
  virtual const char* tier() const = 0;
  // Where it is (a path, a URL), for logs.
  virtual std::string where() const = 0;

  // Reads the record stored under `key` into `out` (resized to it; a
  // buffer of the right size is reused as it is, without new pages).
  // False when absent or when the tier cannot be read now (then error()
  // says why).
  virtual bool get(const StoreKey& key, std::vector<uint8_t>& out) = 0;
  // The same into a new buffer.
  std::optional<std::vector<uint8_t>> get(const StoreKey& key) {
    std::vector<uint8_t> out;
    if (!get(key, out)) return std::nullopt;
    return out;
  }
  // Stores a whole record; false (error() says why) when the tier refused it.
  virtual bool put(const StoreKey& key, std::span<const uint8_t> record) = 0;
  // Whether a record is stored under `key` (false when unreachable).
  virtual bool contains(const StoreKey& key) = 0;
  // Removes the record under `key` (it failed its check).
  virtual void drop(const StoreKey& key) = 0;

  // The last failure's message ("" after a success).
  const std::string& error() const { return error_; }
  // Whether the last successful get() checked the record's checksum as
  // it read it (kvstore/block_record.h ChecksumStream).
  bool checksummed() const { return checksummed_; }

 protected:
  std::string error_;
  bool checksummed_ = false;
};

}  // namespace tessera::kvstore
