#include "kvstore/block_record.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace tessera::kvstore {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'K', 'V', 'B', 'L', 'K', '\0'};

// Little-endian on every machine Tessera builds for (x86-64); a record is
// read back only by the same build family.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t block_size;
  StoreKey key;
  StoreKey parent;
  uint64_t payload_bytes;
  uint64_t checksum;  // XXH3-64 of the header with this field zero, then the body
};
static_assert(sizeof(Header) == record_payload_offset(0));

uint64_t checksum_of(Header h, std::span<const uint8_t> body) {
  h.checksum = 0;
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, &h, sizeof h);
  XXH3_64bits_update(&st, body.data(), body.size());
  return XXH3_64bits_digest(&st);
}

// A fixed secret: keys must agree between processes (the identity, hashed
// in, is what keeps models apart).
const unsigned char* chain_secret() {
  static const auto secret = [] {
    std::vector<unsigned char> s(XXH3_SECRET_DEFAULT_SIZE);
    XXH3_generateSecret_fromSeed(s.data(), 0x7e55e4a6b10c4ULL);
    return s;
  }();
  return secret.data();
}

}  // namespace

std::string StoreKey::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

std::optional<StoreKey> StoreKey::from_hex(std::string_view s) {
  if (s.size() != 32) return std::nullopt;
  StoreKey k;
  for (size_t i = 0; i < 32; ++i) {
    const char c = s[i];
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else return std::nullopt;
    uint64_t& w = i < 16 ? k.hi : k.lo;
    w = (w << 4) | static_cast<uint64_t>(v);
  }
  return k;
}

StoreKey hash128(std::span<const uint8_t> bytes, StoreKey seed) {
  Hasher128 h;
  h.update_value(seed);
  h.update(bytes.data(), bytes.size());
  return h.digest();
}

Hasher128::Hasher128() : state_(XXH3_createState()) { XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_)); }
Hasher128::~Hasher128() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Hasher128::update(const void* data, size_t n) { XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, n); }
void Hasher128::update_string(std::string_view s) {
  update_value(static_cast<uint64_t>(s.size()));
  update(s.data(), s.size());
}
StoreKey Hasher128::digest() const {
  const XXH128_hash_t d = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return {d.low64, d.high64};
}

StoreKey chain_key(const StoreKey& identity, const StoreKey& parent, std::span<const int32_t> tokens) {
  XXH3_state_t st;
  XXH3_128bits_reset_withSecret(&st, chain_secret(), XXH3_SECRET_DEFAULT_SIZE);
  XXH3_128bits_update(&st, &identity, sizeof identity);
  XXH3_128bits_update(&st, &parent, sizeof parent);
  XXH3_128bits_update(&st, tokens.data(), tokens.size_bytes());
  const XXH128_hash_t d = XXH3_128bits_digest(&st);
  StoreKey k{d.low64, d.high64};
  if (k.empty()) k.lo = 1;  // empty means "no parent"
  return k;
}

std::vector<uint8_t> encode_record(const BlockRef& ref, std::span<const uint8_t> payload) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kRecordVersion;
  h.block_size = static_cast<uint32_t>(ref.tokens.size());
  h.key = ref.key;
  h.parent = ref.parent;
  h.payload_bytes = payload.size();
  std::vector<uint8_t> out(sizeof h + ref.tokens.size() * sizeof(int32_t) + payload.size());
  uint8_t* body = out.data() + sizeof h;
  std::memcpy(body, ref.tokens.data(), ref.tokens.size() * sizeof(int32_t));
  std::memcpy(body + ref.tokens.size() * sizeof(int32_t), payload.data(), payload.size());
  h.checksum = checksum_of(h, std::span<const uint8_t>(body, out.size() - sizeof h));
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

std::optional<StoreKey> record_key(std::span<const uint8_t> bytes) {
  if (bytes.size() < sizeof(Header)) return std::nullopt;
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return std::nullopt;
  return h.key;
}

ChecksumStream::ChecksumStream() : state_(XXH3_createState()) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_)); }
ChecksumStream::~ChecksumStream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void ChecksumStream::feed(const uint8_t* data, size_t size) {
  auto* st = static_cast<XXH3_state_t*>(state_);
  if (fed_ < sizeof header_) {
    const size_t n = std::min(size, sizeof header_ - fed_);
    std::memcpy(header_ + fed_, data, n);
    fed_ += n;
    data += n;
    size -= n;
    if (fed_ < sizeof header_) return;
    Header h;
    std::memcpy(&h, header_, sizeof h);
    h.checksum = 0;
    XXH3_64bits_update(st, &h, sizeof h);
  }
  XXH3_64bits_update(st, data, size);
  fed_ += size;
}

bool ChecksumStream::matches() const {
  if (fed_ < sizeof header_) return false;
  Header h;
  std::memcpy(&h, header_, sizeof h);
  return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)) == h.checksum;
}

std::string check_record(std::span<const uint8_t> bytes, const BlockRef* expect, size_t expect_payload,
                         bool checksummed) {
  if (bytes.size() < sizeof(Header)) return fmt::format("truncated: {} bytes, less than a header", bytes.size());
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return "not a Tessera KV block (bad magic)";
  if (h.version != kRecordVersion) return fmt::format("record version {} (this build reads {})", h.version, kRecordVersion);
  const uint64_t body = static_cast<uint64_t>(h.block_size) * sizeof(int32_t) + h.payload_bytes;
  if (h.block_size == 0 || h.block_size > 1024 || h.payload_bytes > (uint64_t{1} << 34) ||
      bytes.size() != sizeof(Header) + body) {
    return fmt::format("truncated or padded: {} bytes, the header says {}", bytes.size(), sizeof(Header) + body);
  }
  const auto body_span = bytes.subspan(sizeof(Header));
  if (!checksummed && checksum_of(h, body_span) != h.checksum) return "checksum mismatch (corrupt)";
  if (expect == nullptr) return "";
  if (!(h.key == expect->key)) return "another key";
  if (!(h.parent == expect->parent)) return "another parent block";
  if (h.block_size != expect->tokens.size() ||
      std::memcmp(body_span.data(), expect->tokens.data(), expect->tokens.size() * sizeof(int32_t)) != 0) {
    return "other tokens";
  }
  if (expect_payload > 0 && h.payload_bytes != expect_payload) {
    return fmt::format("payload of {} bytes, expected {}", h.payload_bytes, expect_payload);
  }
  return "";
}

}  // namespace tessera::kvstore
