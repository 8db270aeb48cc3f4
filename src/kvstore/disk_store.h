// The disk tier: one file per block under a directory, shared safely by
// every process pointed at it.
//
//   DIR/blocks/ab/abcdef....kvb   a record (kvstore/block_record.h), named by its key
//   DIR/tmp/                      records being written
//
// Crash-safe: a record is written to DIR/tmp, then renamed into place, so
// a reader sees a whole record or none; a process killed mid-write leaves
// only a file in tmp/, which trim() removes. Not fsync'ed: after an OS
// crash or power loss a renamed file may hold torn bytes, which the
// record's checksum catches on load (the file is dropped and the block
// recomputed) — durability is not needed of a cache, correctness is.
//
// Bounded: when the bytes under blocks/ pass max_bytes, the least recently
// used records (by modification time: a read touches its file) are deleted
// until 90% of the bound is left. The count is kept in memory from a scan
// at open and this process's own writes; other processes sharing the
// directory keep theirs, and a fresh scan at each trim makes the bound hold
// for all of them together.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvstore/block_store.h"

namespace tessera::kvstore {

struct DiskUsage {
  int64_t records = 0;
  int64_t bytes = 0;
  int64_t temp_files = 0;
};

struct VerifyReport {
  int64_t records = 0;  // files checked
  // Files that fail: (path, why).
  std::vector<std::pair<std::string, std::string>> bad;
};

class DiskStore final : public BlockStore {
 public:
  // Creates the directory if needed. Throws Error(kIo) when it cannot.
  // max_bytes 0: unbounded.
  DiskStore(std::string dir, int64_t max_bytes);

  const char* tier() const override { return "disk"; }
  std::string where() const override { return dir_; }
  using BlockStore::get;
  bool get(const StoreKey& key, std::vector<uint8_t>& out) override;
  bool put(const StoreKey& key, std::span<const uint8_t> record) override;
  bool contains(const StoreKey& key) override;
  void drop(const StoreKey& key) override;

  // The path a key's record lives at.
  std::string path_of(const StoreKey& key) const;

  // What is on disk now (a scan).
  DiskUsage usage() const;
  // Deletes the least recently used records until at most `max_bytes` are
  // left, and temporary files older than `temp_age_s` seconds (a writer
  // that died). Returns the records deleted.
  int64_t trim(int64_t max_bytes, double temp_age_s = 60.0);

  // Reads every record and checks it (structure, checksum, the key its
  // name says); with `drop`, deletes the ones that fail.
  VerifyReport verify(bool drop);

  int64_t bytes_estimate() const { return bytes_; }

 private:
  std::string dir_;
  int64_t max_bytes_;
  int64_t bytes_ = 0;  // this process's view of the bytes stored
  uint64_t tmp_counter_ = 0;
};

}  // namespace tessera::kvstore
