// The Redis tier: records as Redis strings under "tessera:kv:<key hex>",
// through hiredis (Debian's libhiredis). Many processes may share one
// server; SET of a whole value is atomic, so readers see a whole record
// or none. Bounding is Redis's own business (maxmemory with an LRU
// policy, as Redis configures it).
//
// Failures never stop the engine: a lost connection makes every call a
// miss (or a refused write) until a reconnection succeeds; reconnections
// are tried at most once per `retry_s` seconds, so a stopped server costs
// nothing per request.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "kvstore/block_store.h"

struct redisContext;

namespace tessera::kvstore {

class RedisStore final : public BlockStore {
 public:
  // host:port; nothing is connected until the first call.
  RedisStore(std::string host, int port, double timeout_s = 2.0, double retry_s = 1.0);
  ~RedisStore() override;

  const char* tier() const override { return "redis"; }
  std::string where() const override;
  using BlockStore::get;
  bool get(const StoreKey& key, std::vector<uint8_t>& out) override;
  bool put(const StoreKey& key, std::span<const uint8_t> record) override;
  bool contains(const StoreKey& key) override;
  void drop(const StoreKey& key) override;

  bool connected() const { return ctx_ != nullptr; }

 private:
  // A connected context, or nullptr (error_ says why).
  redisContext* connection();
  void disconnect(const char* what);
  // A reply this client cannot read: the connection is dropped (false).
  bool protocol_error(const char* what);

  std::string host_;
  int port_;
  double timeout_s_, retry_s_;
  redisContext* ctx_ = nullptr;
  std::chrono::steady_clock::time_point next_try_{};
};

// Parses "redis://HOST:PORT" (PORT defaults to 6379); false if `uri` is not one.
bool parse_redis_uri(const std::string& uri, std::string& host, int& port);

}  // namespace tessera::kvstore
