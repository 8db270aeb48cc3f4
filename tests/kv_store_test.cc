// The global prompt cache (src/kvstore/): records, keys, the disk and Redis
// tiers (a real redis-server started by the test), the tiered store's
// worker, and the engine end to end on stories260K — a second engine on the
// same store takes the first one's blocks and gives bit-identical outputs;
// another model, KV type or adapter never matches; corrupt records are
// recomputed.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "adapters/random_lora.h"
#include "engine/engine.h"
#include "kvstore/block_record.h"
#include "kvstore/disk_store.h"
#include "kvstore/redis_store.h"
#include "kvstore/tiered_store.h"
#include "model/fingerprint.h"
#include "tokenizer/tokenizer.h"
#include "util/test_util.h"

namespace tessera::kvstore {
namespace {

namespace fs = std::filesystem;

BlockRef make_ref(uint64_t seed, const StoreKey& parent = {}, int32_t block_size = 16) {
  BlockRef r;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int32_t i = 0; i < block_size; ++i) r.tokens.push_back(static_cast<int32_t>(rng() % 32000));
  r.parent = parent;
  r.key = chain_key(StoreKey{seed, 7}, parent, r.tokens);
  return r;
}

std::vector<uint8_t> make_payload(size_t n, uint64_t seed) {
  std::vector<uint8_t> p(n);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (auto& b : p) b = static_cast<uint8_t>(rng());
  return p;
}

TEST(KvStoreRecord, RoundTripsAndEveryFieldIsChecked) {
  const BlockRef ref = make_ref(1, StoreKey{5, 6});
  const std::vector<uint8_t> payload = make_payload(1000, 2);
  const std::vector<uint8_t> rec = encode_record(ref, payload);
  EXPECT_EQ(check_record(rec, &ref, payload.size()), "");
  EXPECT_EQ(record_key(rec), ref.key);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), rec.begin() + record_payload_offset(16)));
  // Any flipped byte is caught (the header's magic by name, the rest by the checksum).
  for (size_t at = 0; at < rec.size(); at += 37) {
    std::vector<uint8_t> bad = rec;
    bad[at] ^= 0x10;
    EXPECT_NE(check_record(bad), "") << "byte " << at;
  }
  // Truncated or padded.
  EXPECT_NE(check_record(std::span<const uint8_t>(rec).first(rec.size() - 1)), "");
  EXPECT_NE(check_record(std::span<const uint8_t>(rec).first(10)), "");
  std::vector<uint8_t> longer = rec;
  longer.push_back(0);
  EXPECT_NE(check_record(longer), "");
  // What the reader expects: another key, parent, tokens or size is refused.
  BlockRef other = ref;
  other.key.lo ^= 1;
  EXPECT_EQ(check_record(rec, &other), "another key");
  other = ref;
  other.parent = {};
  EXPECT_EQ(check_record(rec, &other), "another parent block");
  other = ref;
  other.tokens[3] += 1;
  EXPECT_EQ(check_record(rec, &other), "other tokens");
  EXPECT_NE(check_record(rec, &ref, payload.size() + 2), "");
}

TEST(KvStoreRecord, StreamedChecksumAgreesWithTheWholeCheck) {
  const BlockRef ref = make_ref(9);
  const std::vector<uint8_t> rec = encode_record(ref, make_payload(5000, 3));
  std::mt19937 rng(1);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<uint8_t> r = rec;
    const bool corrupt = trial % 2 == 1;
    if (corrupt) r[rng() % r.size()] ^= 0x40;
    ChecksumStream sum;
    for (size_t at = 0; at < r.size();) {
      const size_t n = std::min<size_t>(r.size() - at, 1 + rng() % 700);
      sum.feed(r.data() + at, n);
      at += n;
    }
    EXPECT_EQ(sum.matches(), check_record(r) == "") << trial;
    EXPECT_EQ(sum.matches(), !corrupt) << trial;
  }
}

TEST(KvStoreKeys, ChainKeysDependOnIdentityParentAndTokens) {
  const std::vector<int32_t> t = {1, 2, 3, 4};
  const StoreKey a = chain_key({1, 2}, {}, t);
  EXPECT_EQ(a, chain_key({1, 2}, {}, t));  // no per-process secret
  EXPECT_NE(a, chain_key({1, 3}, {}, t));
  EXPECT_NE(a, chain_key({1, 2}, {9, 9}, t));
  EXPECT_NE(a, chain_key({1, 2}, {}, std::vector<int32_t>{1, 2, 3, 5}));
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(StoreKey::from_hex(a.hex()), a);
  EXPECT_FALSE(StoreKey::from_hex("zz"));
}

TEST(KvStoreDisk, PutGetDropAndCrashLeftovers) {
  const std::string dir = testing::temp_path("disk_basic");
  DiskStore d(dir, 0);
  const BlockRef ref = make_ref(3);
  const std::vector<uint8_t> rec = encode_record(ref, make_payload(500, 4));
  EXPECT_FALSE(d.get(ref.key));
  EXPECT_EQ(d.error(), "");  // absent is not an error
  ASSERT_TRUE(d.put(ref.key, rec)) << d.error();
  EXPECT_TRUE(d.contains(ref.key));
  EXPECT_EQ(d.get(ref.key), rec);
  // A writer killed mid-write leaves a file in tmp/ only: never read, and
  // gc removes it once old.
  testing::write_file(dir + "/tmp/" + ref.key.hex() + ".999.0", "half a rec");
  EXPECT_EQ(d.usage().records, 1);
  EXPECT_EQ(d.usage().temp_files, 1);
  d.trim(int64_t{1} << 40, /*temp_age_s=*/-1.0);
  EXPECT_EQ(d.usage().temp_files, 0);
  EXPECT_EQ(d.usage().records, 1);
  d.drop(ref.key);
  EXPECT_FALSE(d.contains(ref.key));
}

TEST(KvStoreDisk, TrimsLeastRecentlyUsedFirst) {
  const std::string dir = testing::temp_path("disk_lru");
  DiskStore d(dir, 0);
  std::vector<BlockRef> refs;
  for (int i = 0; i < 6; ++i) {
    refs.push_back(make_ref(100 + static_cast<uint64_t>(i)));
    ASSERT_TRUE(d.put(refs.back().key, encode_record(refs.back(), make_payload(1000, i))));
    // Distinct ages: record i is i hours older than record 0... reversed.
    const auto t = fs::file_time_type::clock::now() - std::chrono::hours(10 - i);
    fs::last_write_time(d.path_of(refs.back().key), t);
  }
  // Reading record 0 makes it the most recent.
  ASSERT_TRUE(d.get(refs[0].key));
  const int64_t one = static_cast<int64_t>(fs::file_size(d.path_of(refs[0].key)));
  EXPECT_EQ(d.trim(3 * one), 3);
  EXPECT_TRUE(d.contains(refs[0].key));
  EXPECT_FALSE(d.contains(refs[1].key));
  EXPECT_FALSE(d.contains(refs[2].key));
  EXPECT_FALSE(d.contains(refs[3].key));
  EXPECT_TRUE(d.contains(refs[4].key));
  EXPECT_TRUE(d.contains(refs[5].key));
  // A bounded store trims as it writes.
  DiskStore bounded(dir, 4 * one);
  for (int i = 0; i < 8; ++i) {
    const BlockRef r = make_ref(200 + static_cast<uint64_t>(i));
    ASSERT_TRUE(bounded.put(r.key, encode_record(r, make_payload(1000, i))));
  }
  EXPECT_LE(bounded.usage().bytes, 4 * one);
}

TEST(KvStoreDisk, VerifyFindsCorruptAndMisnamedRecords) {
  const std::string dir = testing::temp_path("disk_verify");
  DiskStore d(dir, 0);
  std::vector<BlockRef> refs;
  for (int i = 0; i < 4; ++i) {
    refs.push_back(make_ref(300 + static_cast<uint64_t>(i)));
    ASSERT_TRUE(d.put(refs.back().key, encode_record(refs.back(), make_payload(300, i))));
  }
  EXPECT_TRUE(d.verify(false).bad.empty());
  {
    std::fstream f(d.path_of(refs[1].key), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const std::string misnamed = fs::path(d.path_of(refs[3].key)).parent_path().string() + "/" + make_ref(998).key.hex() + ".kvb";
  fs::copy_file(d.path_of(refs[3].key), misnamed);
  const VerifyReport r = d.verify(/*drop=*/true);
  EXPECT_EQ(r.records, 5);
  ASSERT_EQ(r.bad.size(), 2u);
  EXPECT_EQ(d.verify(false).bad.size(), 0u);
  EXPECT_FALSE(d.contains(refs[1].key));
}

// kill -9 of a writer at random moments: every record a reader can see is
// whole (the kills that land mid-write leave only files in tmp/).
TEST(KvStoreDisk, KillNineMidWriteLeavesNoBrokenRecord) {
  const std::string dir = testing::temp_path("disk_kill");
  std::mt19937 rng(5);
  // Big records written back to back: most of the child's time is inside put().
  const std::vector<uint8_t> payload = make_payload(size_t{8} << 20, 1);
  // At least 10 rounds, and more (up to 60) until a record has landed and a
  // kill has caught a write in the middle: on a busy host a round's child
  // may not get that far in its 20-60 ms. The records are encoded before the
  // fork (under ASan, checksumming 8 MiB took longer than a whole round).
  int rounds = 0;  // run so far
  for (int round = 0; round < 60; ++round) {
    rounds = round + 1;
    std::vector<std::pair<BlockRef, std::vector<uint8_t>>> records;
    for (uint64_t i = 0; i < 2; ++i) {
      const BlockRef r = make_ref(10000 * static_cast<uint64_t>(round + 1) + i);
      records.emplace_back(r, encode_record(r, payload));
    }
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      DiskStore d(dir, 0);
      for (;;) {
        for (const auto& [r, rec] : records) d.put(r.key, rec);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 40));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    const DiskUsage seen = DiskStore(dir, 0).usage();
    if (round >= 9 && seen.records > 0 && seen.temp_files > 0) break;
  }
  DiskStore d(dir, 0);
  const DiskUsage u = d.usage();
  EXPECT_GT(u.records, 0) << rounds << " rounds";
  EXPECT_GT(u.temp_files, 0) << "no kill landed mid-write in " << rounds << " rounds: the test proved nothing";
  const VerifyReport r = d.verify(false);
  EXPECT_EQ(r.records, u.records);
  EXPECT_TRUE(r.bad.empty()) << r.bad.front().first << ": " << r.bad.front().second;
  d.trim(int64_t{1} << 40, -1.0);
  EXPECT_EQ(d.usage().temp_files, 0);
}

// A full disk: a 256 KiB tmpfs (needs root, as CI runs; skipped with the
// reason otherwise). Writes fail cleanly, leave nothing half-written, and
// records already there stay readable.
TEST(KvStoreDisk, FullDiskRefusesWritesAndLeavesNothingBehind) {
  const std::string dir = testing::temp_path("disk_full");
  fs::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << "): needs root";
  }
  {
    DiskStore d(dir, 0);
    int ok = 0, refused = 0;
    std::vector<StoreKey> written;
    for (int i = 0; i < 40; ++i) {
      const BlockRef r = make_ref(400 + static_cast<uint64_t>(i));
      if (d.put(r.key, encode_record(r, make_payload(20000, i)))) {
        ++ok;
        written.push_back(r.key);
      } else {
        ++refused;
        EXPECT_NE(d.error(), "");
      }
    }
    EXPECT_GT(ok, 0);
    EXPECT_GT(refused, 0);
    EXPECT_EQ(d.usage().temp_files, 0);
    EXPECT_TRUE(d.verify(false).bad.empty());
    for (const StoreKey& k : written) EXPECT_TRUE(d.get(k));
  }
  ::umount(dir.c_str());
}

// --- Redis: a real server per test --------------------------------------------

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

class RedisServer {
 public:
  RedisServer(int port, std::string dir) : port_(port), dir_(std::move(dir)) { start(); }
  ~RedisServer() { stop(); }
  void start() {
    fs::create_directories(dir_);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      const std::string port = std::to_string(port_);
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", dir_.c_str(), "--logfile", "", "--loglevel", "warning",
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
    RedisStore probe("127.0.0.1", port_, 1.0, 0.0);
    for (int i = 0; i < 200 && !probe.contains(StoreKey{1, 1}) && !probe.connected(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_TRUE(probe.connected()) << "redis-server did not start on port " << port_ << ": " << probe.error();
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  int port_;
  std::string dir_;
  pid_t pid_ = -1;
};

TEST(KvStoreRedis, PutGetDropAndSurvivesAStoppedServer) {
  RedisServer server(free_port(), testing::temp_path("redis1"));
  RedisStore r("127.0.0.1", server.port(), 1.0, 0.2);
  const BlockRef ref = make_ref(5);
  const std::vector<uint8_t> rec = encode_record(ref, make_payload(4000, 6));
  EXPECT_FALSE(r.get(ref.key));
  EXPECT_EQ(r.error(), "");
  ASSERT_TRUE(r.put(ref.key, rec)) << r.error();
  EXPECT_TRUE(r.contains(ref.key));
  EXPECT_EQ(r.get(ref.key), rec);
  r.drop(ref.key);
  EXPECT_FALSE(r.contains(ref.key));
  ASSERT_TRUE(r.put(ref.key, rec));

  server.stop();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(r.get(ref.key));
    EXPECT_NE(r.error(), "");
    EXPECT_FALSE(r.put(ref.key, rec));
  }
  // A stopped server costs a failed connection at most every retry_s.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);

  server.start();  // empty: nothing was saved
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(r.put(ref.key, rec)) << r.error();
  EXPECT_EQ(r.get(ref.key), rec);
}

TEST(KvStoreRedis, ParsesUris) {
  std::string host;
  int port = 0;
  EXPECT_TRUE(parse_redis_uri("redis://10.0.0.1:7000", host, port));
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_EQ(port, 7000);
  EXPECT_TRUE(parse_redis_uri("redis://cache", host, port));
  EXPECT_EQ(port, 6379);
  EXPECT_FALSE(parse_redis_uri("redis://h:12x", host, port));
  EXPECT_FALSE(parse_redis_uri("/tmp/dir", host, port));
}

// --- the tiered store -----------------------------------------------------------

TieredStore::Blocks wait_poll(TieredStore& s, TieredStore::Ticket t) {
  for (int i = 0; i < 2000; ++i) {
    if (auto b = s.poll(t)) return *b;
    s.wait_for_load(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "ticket never finished";
  return {};
}

TEST(KvStoreTiered, LoadsUntilTheFirstMissPromotesAndDropsCorrupt) {
  RedisServer server(free_port(), testing::temp_path("redis2"));
  const std::string dir = testing::temp_path("tiered");
  const size_t payload = 2048;
  const std::string redis = "redis://127.0.0.1:" + std::to_string(server.port());
  std::vector<BlockRef> chain;
  for (int i = 0; i < 5; ++i) chain.push_back(make_ref(500 + static_cast<uint64_t>(i), i ? chain.back().key : StoreKey{}));
  {
    // A writer with Redis only.
    TieredStore w([&] { return open_tiers({redis}, 0); }, {payload});
    for (int i = 0; i < 3; ++i) w.put(chain[static_cast<size_t>(i)], make_payload(payload, static_cast<uint64_t>(i)));
    EXPECT_TRUE(w.known(chain[0].key));
    w.flush();
    EXPECT_EQ(w.stats().tiers[0].writes, 3);
  }
  // Named Redis first: the disk, faster, is asked first all the same.
  TieredStore s([&] { return open_tiers({redis, dir}, 0); }, {payload});
  TieredStore::Blocks got = wait_poll(s, s.prefetch(chain));
  ASSERT_EQ(got.size(), 3u);  // blocks 3 and 4 were never written
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i]->key, chain[i].key);
    const auto p = make_payload(payload, i);
    EXPECT_TRUE(std::equal(p.begin(), p.end(), got[i]->payload().begin()));
  }
  KvStoreStats st = s.stats();
  EXPECT_EQ(st.tiers[0].tier, "disk");
  EXPECT_EQ(st.tiers[0].misses, 4);  // blocks 0-2, then block 3 in both tiers
  EXPECT_EQ(st.tiers[1].hits, 3);
  EXPECT_EQ(st.tiers[0].writes, 3);  // promoted to disk
  // Now the disk has them; corrupt block 1 there: it is dropped and Redis serves it.
  DiskStore view(dir, 0);
  {
    std::fstream f(view.path_of(chain[1].key), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x01');
  }
  got = wait_poll(s, s.prefetch({chain[0], chain[1], chain[2]}));
  EXPECT_EQ(got.size(), 3u);
  st = s.stats();
  EXPECT_EQ(st.tiers[0].hits, 2);
  EXPECT_EQ(st.tiers[0].corrupt, 1);
  EXPECT_EQ(st.tiers[1].hits, 4);
  EXPECT_TRUE(view.verify(false).bad.empty());  // the corrupt file was replaced by the promoted copy
  // A corrupt value in Redis (the disk lacks block 3): counted, dropped, a miss.
  {
    std::vector<uint8_t> bad = encode_record(chain[3], make_payload(payload, 3));
    bad[bad.size() / 2] ^= 1;
    RedisStore direct("127.0.0.1", server.port());
    ASSERT_TRUE(direct.put(chain[3].key, bad));
    got = wait_poll(s, s.prefetch({chain[2], chain[3]}));
    EXPECT_EQ(got.size(), 1u);
    EXPECT_EQ(s.stats().tiers[1].corrupt, 1);
    EXPECT_FALSE(direct.contains(chain[3].key));
  }
  // Redis stopped: the disk tier alone still serves; Redis counts errors.
  server.stop();
  got = wait_poll(s, s.prefetch({chain[0], chain[1], chain[2], chain[3]}));
  EXPECT_EQ(got.size(), 3u);
  EXPECT_GT(s.stats().tiers[1].read_errors, 0);
  // A cancelled ticket is forgotten.
  const auto t = s.prefetch({chain[0]});
  s.cancel(t);
}

TEST(KvStoreTiered, WriteQueueIsBoundedAndNeverBlocks) {
  const std::string dir = testing::temp_path("bounded_queue");
  TieredStore s([&] { return open_tiers({dir}, 0); }, {4096, /*max_queue_bytes=*/3 * 4096});
  for (int i = 0; i < 50; ++i) s.put(make_ref(700 + static_cast<uint64_t>(i)), make_payload(4096, i));
  s.flush();
  const KvStoreStats st = s.stats();
  EXPECT_EQ(st.tiers[0].writes + st.writes_dropped, 50);
  EXPECT_EQ(st.queue_bytes, 0);
}

}  // namespace
}  // namespace tessera::kvstore

// --- the engine end to end -------------------------------------------------------

namespace tessera::engine {
namespace {

struct Out {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t cached = 0;
};

std::vector<Out> run_prompts(Engine& e, const std::vector<std::vector<int32_t>>& prompts, RequestAdapters ad = {}) {
  SamplingParams p = testing::greedy(24);
  p.logprobs = true;
  std::map<RequestId, Out> by_id;
  std::vector<RequestId> ids;
  for (const auto& pr : prompts) ids.push_back(e.add_request(pr, p, {}, ad));
  int guard = 0;
  while (e.has_unfinished()) {
    for (const RequestOutput& o : e.step()) {
      Out& c = by_id[o.id];
      c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      c.cached = o.num_cached_tokens;
    }
    EXPECT_LT(++guard, 100000);
  }
  std::vector<Out> out;
  for (RequestId id : ids) out.push_back(by_id[id]);
  return out;
}

// Prompts sharing long prefixes (two families), from the tokenizer.
std::vector<std::vector<int32_t>> family_prompts() {
  const auto& s = testing::stories260k();
  const std::string a = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
                        "with her friends. One day, she saw a big red ball under a tree. ";
  const std::string b = "Tom and his dog Max went to the river. The water was cold and clear. Tom wanted to catch a "
                        "fish, but Max kept barking at the birds. ";
  std::vector<std::vector<int32_t>> out;
  for (const char* tail : {"She ran to get it.", "It was very shiny.", "Her mom said no."}) {
    out.push_back(s.tok->encode(a + a + tail, /*bos=*/true, false));
    out.push_back(s.tok->encode(b + b + tail, /*bos=*/true, false));
  }
  return out;
}

EngineConfig store_config(const std::string& dir) {
  EngineConfig c;
  c.max_model_len = 512;
  c.threads = 2;
  c.kv_type = DType::kF32;
  c.seed = 42;
  if (!dir.empty()) c.kv_store = {dir};
  c.weights_fingerprint = weights_fingerprint(*testing::stories260k().lm.file);
  return c;
}

void expect_same(const std::vector<Out>& a, const std::vector<Out>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "prompt " << i;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size());
    for (size_t j = 0; j < a[i].logprobs.size(); ++j) {
      EXPECT_EQ(a[i].logprobs[j], b[i].logprobs[j]) << "prompt " << i << " token " << j;  // bit-identical
    }
  }
}

int64_t store_hits(const Engine& e) { return e.stats().store_hit_tokens_total; }

TEST(KvStoreEngine, ASecondEngineTakesTheFirstOnesBlocksAndMatchesCold) {
  const auto& s = testing::stories260k();
  const auto prompts = family_prompts();
  Engine cold(*s.lm.model, s.tok.get(), store_config(""));
  const std::vector<Out> want = run_prompts(cold, prompts);

  const std::string dir = testing::temp_path("engine_store");
  {
    Engine first(*s.lm.model, s.tok.get(), store_config(dir));
    expect_same(run_prompts(first, prompts), want);
    EXPECT_EQ(store_hits(first), 0);
  }  // its store writes everything queued as it closes
  EXPECT_GT(kvstore::DiskStore(dir, 0).usage().records, 10);

  Engine second(*s.lm.model, s.tok.get(), store_config(dir));
  const std::vector<Out> got = run_prompts(second, prompts);
  expect_same(got, want);
  EXPECT_GT(got[0].cached, 32);  // the first prompt of a family: from disk
  EXPECT_GT(store_hits(second), 0);
  const auto st = *second.stats().kv_store;
  EXPECT_GT(st.tiers[0].hits, 0);
  EXPECT_EQ(st.tiers[0].corrupt, 0);
}

TEST(KvStoreEngine, WriteBackWritesOnEvictionAndAtShutdown) {
  const auto& s = testing::stories260k();
  const auto prompts = family_prompts();
  Engine cold(*s.lm.model, s.tok.get(), store_config(""));
  const std::vector<Out> want = run_prompts(cold, prompts);
  // A roomy pool evicts nothing: nothing is written until the engine closes.
  const std::string roomy = testing::temp_path("write_back_roomy");
  {
    EngineConfig c = store_config(roomy);
    c.kv_store_write_back = true;
    Engine e(*s.lm.model, s.tok.get(), c);
    run_prompts(e, prompts);
    EXPECT_EQ(e.stats().kv_store->tiers[0].writes, 0);
    EXPECT_EQ(e.stats().kv_store->queue_bytes, 0);
  }
  EXPECT_GT(kvstore::DiskStore(roomy, 0).usage().records, 10);
  // A small pool evicts as it goes: blocks are written while it runs.
  const std::string tight = testing::temp_path("write_back_tight");
  {
    EngineConfig c = store_config(tight);
    c.kv_store_write_back = true;
    c.num_kv_blocks = 24;
    c.max_num_seqs = 1;
    Engine e(*s.lm.model, s.tok.get(), c);
    expect_same(run_prompts(e, prompts), want);
    EXPECT_GT(e.stats().prefix_evictions_total, 0);
    const auto st = *e.stats().kv_store;
    EXPECT_GT(st.tiers[0].writes + st.queue_bytes, 0);
  }
  for (const std::string& dir : {roomy, tight}) {
    Engine again(*s.lm.model, s.tok.get(), store_config(dir));
    expect_same(run_prompts(again, prompts), want);
    EXPECT_GT(store_hits(again), 0) << dir;
  }
}

TEST(KvStoreEngine, WriteBackNeverWritesBlocksWhoseContentsWereDropped) {
  // A fault in the forward pass makes the engine forget every cached
  // block's contents (they are only trusted again once recomputed); the
  // blocks are then reused for other prompts. Write-back must not copy them
  // out at shutdown under their old keys.
  const auto& s = testing::stories260k();
  const auto prompts = family_prompts();
  const std::vector<std::vector<int32_t>> a = {prompts[0], prompts[2]};
  Engine cold(*s.lm.model, s.tok.get(), store_config(""));
  const std::vector<Out> want = run_prompts(cold, a);
  const std::string dir = testing::temp_path("write_back_fault");
  {
    EngineConfig c = store_config(dir);
    c.kv_store_write_back = true;
    c.num_kv_blocks = 40;
    c.max_num_seqs = 1;
    bool armed = false;
    c.fault_hook = [&armed](const FaultSite& site) {
      if (site.stage == FaultStage::kForward && armed) {
        armed = false;
        throw std::runtime_error("injected");
      }
    };
    Engine e(*s.lm.model, s.tok.get(), c);
    run_prompts(e, a);
    armed = true;
    run_prompts(e, {prompts[4]});  // fails in the forward pass: the engine restarts its cache
    EXPECT_EQ(e.stats().engine_restarts_total, 1);
    // Short requests that never fill a block (nothing registered): they
    // cycle through every block of the pool, writing over a's old prefixes.
    for (int32_t i = 0; i < 60; ++i) {
      e.add_request(std::vector<int32_t>{s.tok->bos_id(), 100 + i}, testing::greedy(8));
      while (e.has_unfinished()) e.step();
    }
  }
  Engine again(*s.lm.model, s.tok.get(), store_config(dir));
  expect_same(run_prompts(again, a), want);
  EXPECT_TRUE(kvstore::DiskStore(dir, 0).verify(false).bad.empty());
}

TEST(KvStoreEngine, OtherKvTypeWeightsOrAdapterNeverMatch) {
  const auto& s = testing::stories260k();
  const auto prompts = family_prompts();
  const std::string dir = testing::temp_path("engine_identity");
  {
    Engine first(*s.lm.model, s.tok.get(), store_config(dir));
    run_prompts(first, prompts);
  }
  const int64_t records = kvstore::DiskStore(dir, 0).usage().records;
  ASSERT_GT(records, 10);
  {
    EngineConfig c = store_config(dir);
    c.kv_type = DType::kF16;
    Engine e(*s.lm.model, s.tok.get(), c);
    run_prompts(e, {prompts[0]});
    EXPECT_EQ(store_hits(e), 0);
  }
  {
    EngineConfig c = store_config(dir);
    c.weights_fingerprint.lo ^= 1;  // other weights (another file or quantization)
    Engine e(*s.lm.model, s.tok.get(), c);
    run_prompts(e, {prompts[0]});
    EXPECT_EQ(store_hits(e), 0);
  }
  {
    EngineConfig c = store_config(dir);
    c.block_size = 32;
    Engine e(*s.lm.model, s.tok.get(), c);
    run_prompts(e, {prompts[0]});
    EXPECT_EQ(store_hits(e), 0);
  }
  const auto lora = adapters::random_lora(s.lm.model->config(), 4, adapters::kAllLoraTargets, 11);
  const auto lora2 = adapters::random_lora(s.lm.model->config(), 4, adapters::kAllLoraTargets, 12);
  {
    Engine e(*s.lm.model, s.tok.get(), store_config(dir));
    run_prompts(e, {prompts[0]}, lora);
    EXPECT_EQ(store_hits(e), 0);  // base-model blocks are not the adapter's
  }
  {
    Engine e(*s.lm.model, s.tok.get(), store_config(dir));
    Engine cold(*s.lm.model, s.tok.get(), store_config(""));
    const auto want = run_prompts(cold, {prompts[0]}, lora);
    expect_same(run_prompts(e, {prompts[0]}, lora), want);
    EXPECT_GT(store_hits(e), 0);  // the same adapter's blocks, stored by the engine before
    run_prompts(e, {prompts[1]}, lora2);
    const int64_t before = store_hits(e);
    Engine e2(*s.lm.model, s.tok.get(), store_config(dir));
    run_prompts(e2, {prompts[0]}, lora2);
    EXPECT_EQ(store_hits(e2), 0) << before;  // another adapter
  }
}

TEST(KvStoreEngine, CorruptRecordsAreRecomputedNeverUsed) {
  const auto& s = testing::stories260k();
  const auto prompts = family_prompts();
  Engine cold(*s.lm.model, s.tok.get(), store_config(""));
  const std::vector<Out> want = run_prompts(cold, prompts);
  const std::string dir = testing::temp_path("engine_corrupt");
  {
    Engine first(*s.lm.model, s.tok.get(), store_config(dir));
    run_prompts(first, prompts);
  }
  // Corrupt every other record: one K/V byte each (the checksum's job).
  int n = 0;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir + "/blocks")) {
    if (!f.is_regular_file() || (n++ % 2) != 0) continue;
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(std::filesystem::file_size(f.path()) - 5));
    io.put('\x55');
  }
  Engine second(*s.lm.model, s.tok.get(), store_config(dir));
  expect_same(run_prompts(second, prompts), want);
  EXPECT_GT(second.stats().kv_store->tiers[0].corrupt, 0);
}

TEST(KvStoreEngine, ALoadingRequestDoesNotHoldOthersBack) {
  // The only tier is a Redis server that accepts connections but never
  // answers (stopped with SIGSTOP): a request whose blocks are being looked
  // up waits (at most kv_store_wait_s) while a request behind it runs; then
  // it is computed, with the cold output.
  const auto& s = testing::stories260k();
  const auto prompts = family_prompts();
  kvstore::RedisServer server(kvstore::free_port(), testing::temp_path("redis_stall"));
  EngineConfig c = store_config("");
  c.kv_store = {"redis://127.0.0.1:" + std::to_string(server.port())};
  c.kv_store_wait_s = 0.5;
  Engine e(*s.lm.model, s.tok.get(), c);
  Engine cold(*s.lm.model, s.tok.get(), store_config(""));
  const auto want = run_prompts(cold, {prompts[1]});
  ASSERT_EQ(::kill(server.pid(), SIGSTOP), 0);
  SamplingParams p = testing::greedy(24);
  p.logprobs = true;
  const RequestId slow = e.add_request(prompts[1], p);
  const RequestId quick = e.add_request(s.tok->encode("Once", true, false), testing::greedy(8));
  std::vector<RequestId> finished;
  Out got;
  for (int guard = 0; e.has_unfinished() && guard < 100000; ++guard) {
    for (const RequestOutput& o : e.step()) {
      if (o.id == slow) {
        got.tokens.insert(got.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
        got.logprobs.insert(got.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      }
      if (o.finished) finished.push_back(o.id);
    }
  }
  ::kill(server.pid(), SIGCONT);
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished[0], quick);  // it did not wait behind the lookup
  expect_same({got}, want);
  EXPECT_EQ(store_hits(e), 0);
}

}  // namespace
}  // namespace tessera::engine
