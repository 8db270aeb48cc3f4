// The global prompt cache's unit: one full KV block, addressed by content,
// as stored in every lower tier (disk files, Redis values).
//
// A block's key is a 128-bit hash of everything its K/V depends on: the
// request's identity (the model fingerprint — weights, architecture, KV type,
// block size, RoPE settings — mixed with the adapter's or soft prompt's
// content hash) and the whole chain of token ids up to its end, chained
// through the key of the block before it. Nothing in it is per process, so
// a key names the same K/V in any process that loads the same model the same
// way, and never another model's, adapter's or KV type's.
//
// A record is self-checking: a header (magic, version, block size, key,
// parent key, payload size, checksum), the block's token ids, then the K/V
// bytes. decode() checks all of it against what the reader expects — the
// checksum (XXH3-64 of header and body) catches torn or corrupted bytes, and
// the key, parent key and tokens are compared, so a hash collision would
// still need equal tokens and an equal parent chain to be taken.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tessera::kvstore {

struct StoreKey {
  uint64_t lo = 0, hi = 0;
  bool operator==(const StoreKey&) const = default;
  bool empty() const { return lo == 0 && hi == 0; }
  std::string hex() const;  // 32 hex digits, hi first
  static std::optional<StoreKey> from_hex(std::string_view s);
};

struct StoreKeyHash {
  size_t operator()(const StoreKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ULL)); }
};

// XXH3-128 of arbitrary bytes (fingerprints of weights, adapters, configs).
StoreKey hash128(std::span<const uint8_t> bytes, StoreKey seed = {});
// Streaming form for many pieces.
class Hasher128 {
 public:
  Hasher128();
  ~Hasher128();
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;
  void update(const void* data, size_t n);
  template <class T>
  void update_value(const T& v) { update(&v, sizeof v); }
  void update_string(std::string_view s);
  StoreKey digest() const;

 private:
  void* state_;
};

// The key of a block: (identity, the previous block's key (empty for a
// first block), the block's tokens).
StoreKey chain_key(const StoreKey& identity, const StoreKey& parent, std::span<const int32_t> tokens);

// What a reader expects of a record.
struct BlockRef {
  StoreKey key;
  StoreKey parent;
  std::vector<int32_t> tokens;  // [block_size]
};

// A verified record held in memory: its bytes and where the K/V starts.
struct StoredBlock {
  StoreKey key;
  std::vector<uint8_t> bytes;
  size_t payload_offset = 0;
  std::span<const uint8_t> payload() const { return std::span<const uint8_t>(bytes).subspan(payload_offset); }
};

constexpr uint32_t kRecordVersion = 1;

// The record of `ref` with K/V `payload`.
std::vector<uint8_t> encode_record(const BlockRef& ref, std::span<const uint8_t> payload);

// Checks a record: structure and checksum always; with `expect`, also its
// key, parent key and tokens, and (expect_payload > 0) the payload size.
// Returns "" when it holds, else why not (for logs and `kv-store verify`).
// `checksummed`: the caller already verified the checksum as the bytes
// arrived (ChecksumStream), so it is not computed again.
std::string check_record(std::span<const uint8_t> bytes, const BlockRef* expect = nullptr, size_t expect_payload = 0,
                         bool checksummed = false);

// The record's checksum computed while its bytes arrive (a network read
// hashes each chunk as it lands, while the next is on its way), so the
// check costs no second pass over the record.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;
  // Bytes [0, size) of the record, in order, in chunks of any size.
  void feed(const uint8_t* data, size_t size);
  // Whether the bytes fed hash to the checksum their header holds.
  bool matches() const;

 private:
  void* state_;
  uint8_t header_[64];
  size_t fed_ = 0;
};

// Where the K/V bytes start in a record of `block_size` tokens.
constexpr size_t record_payload_offset(size_t block_size) { return 64 + block_size * sizeof(int32_t); }

// The key a record says it holds (nullopt when the header is unreadable).
std::optional<StoreKey> record_key(std::span<const uint8_t> bytes);

}  // namespace tessera::kvstore
