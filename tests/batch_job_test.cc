// tessera batch's job (batch/batch_job.h) and its sharded form
// (batch/sharded_job.h) in one process, on stories260K: a job cut anywhere
// (mid-line included) resumes to the same results; a sharded job writes the
// same results as one job and removes its parts; a plan for another input is
// refused. tests/scripts/mpi_batch.sh runs the sharded job on 2 ranks.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "batch/batch_job.h"
#include "batch/sharded_job.h"
#include "core/error.h"
#include "engine/engine.h"
#include "util/test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string requests(int n) {
  const char* starts[] = {"Once upon a time", "Tom had a dog", "The sun was", "Lily wanted to"};
  std::string out;
  for (int i = 0; i < n; ++i) {
    json r = {{"id", i}, {"prompt", starts[i % 4]}, {"max_tokens", 6 + (i * 5) % 17}};
    // Greedy, or sampled from the request's seed: results of the request alone.
    r.update(i % 2 ? json{{"temperature", 0.9}, {"seed", 77 + i}} : json{{"temperature", 0}});
    out += i == 5 ? std::string("[1, 2\n") : r.dump() + "\n";
  }
  return out;
}

// The results without their timings, one per line.
std::vector<json> untimed(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(testing::read_file(path));
  for (std::string line; std::getline(in, line);) {
    json r = json::parse(line);
    r.erase("time_to_first_token_s");
    r.erase("latency_s");
    out.push_back(r);
  }
  return out;
}

struct BatchJobTest : ::testing::Test {
  void SetUp() override {
    TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    dir = testing::temp_dir();
    input = dir + "/in.jsonl";
    testing::write_file(input, requests(23));
  }
  std::unique_ptr<engine::Engine> engine() const {
    const auto& s = testing::stories260k();
    engine::EngineConfig config;
    config.max_num_seqs = 3;  // requests queue, finish out of order
    return std::make_unique<engine::Engine>(*s.lm.model, s.tok.get(), config);
  }
  server::BatchJobOptions job(const std::string& name) const {
    server::BatchJobOptions o;
    o.input_path = input;
    o.output_path = dir + "/" + name;
    o.default_max_tokens = 8;
    return o;
  }
  std::string dir, input;
};

TEST_F(BatchJobTest, ResumesFromAnyCut) {
  const server::BatchJobResult whole = server::run_batch_job(*engine(), job("whole.jsonl"));
  EXPECT_EQ(whole.total, 23);
  EXPECT_EQ(whole.failed, 1);
  EXPECT_EQ(whole.completed, 22);
  const std::vector<json> want = untimed(dir + "/whole.jsonl");
  ASSERT_EQ(want.size(), 23u);
  EXPECT_EQ(want[5]["index"], 5);
  EXPECT_NE(want[5]["error"].get<std::string>().find("line 6: invalid JSON"), std::string::npos);
  const std::string bytes = testing::read_file(dir + "/whole.jsonl");
  for (size_t cut : {size_t{0}, bytes.find('\n') + 1, bytes.size() / 2, bytes.size() - 3}) {
    testing::write_file(dir + "/cut.jsonl", bytes.substr(0, cut));
    const int64_t complete = std::count(bytes.begin(), bytes.begin() + static_cast<long>(cut), '\n');
    const server::BatchJobResult r = server::run_batch_job(*engine(), job("cut.jsonl"));
    EXPECT_EQ(r.skipped, complete) << cut;
    EXPECT_EQ(r.skipped + r.completed + r.failed, 23) << cut;
    EXPECT_EQ(untimed(dir + "/cut.jsonl"), want) << "cut at byte " << cut;
  }
}

TEST_F(BatchJobTest, ShardsInOneProcessWriteTheSameResults) {
  server::run_batch_job(*engine(), job("whole.jsonl"));
  const std::vector<json> want = untimed(dir + "/whole.jsonl");
  // The first 4 results already there: shards cover the other 19.
  const std::string bytes = testing::read_file(dir + "/whole.jsonl");
  size_t cut = 0;
  for (int i = 0; i < 4; ++i) cut = bytes.find('\n', cut) + 1;
  testing::write_file(dir + "/sharded.jsonl", bytes.substr(0, cut));
  const server::ShardedJobResult r =
      server::run_sharded_batch_job(*engine(), dist::World::current(), {.job = job("sharded.jsonl"), .shards = 5});
  EXPECT_EQ(r.shards, 5);
  EXPECT_EQ(r.shards_skipped, 0);
  EXPECT_EQ(r.totals.skipped, 4);
  EXPECT_EQ(r.totals.completed + r.totals.failed, 19);
  EXPECT_EQ(untimed(dir + "/sharded.jsonl"), want);
  EXPECT_FALSE(fs::exists(dir + "/sharded.jsonl.parts"));
  // Run again: nothing to do.
  const server::ShardedJobResult again =
      server::run_sharded_batch_job(*engine(), dist::World::current(), {.job = job("sharded.jsonl"), .shards = 5});
  EXPECT_EQ(again.totals.skipped, 23);
  EXPECT_EQ(again.totals.completed, 0);
}

TEST_F(BatchJobTest, ShardsOfAnotherInputAreRefused) {
  // A plan left by a run of another input (as an interrupted run leaves it).
  fs::create_directories(dir + "/out.jsonl.parts");
  testing::write_file(dir + "/out.jsonl.parts/plan.json",
                      R"({"total": 23, "start": 0, "shards": 4, "digest": "0123456789abcdef"})");
  try {
    server::run_sharded_batch_job(*engine(), dist::World::current(), {.job = job("out.jsonl")});
    FAIL() << "a plan for another input was used";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds shards of another input"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir + "/out.jsonl"));
}

}  // namespace
}  // namespace tessera
