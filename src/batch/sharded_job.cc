#include "batch/sharded_job.h"

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"

namespace tessera::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string digest_of(const std::vector<std::string>& lines) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const std::string& line : lines) {
    XXH3_64bits_update(state, line.data(), line.size());
    XXH3_64bits_update(state, "\n", 1);
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return fmt::format("{:016x}", h);
}

void write_file_atomically(const fs::path& path, const std::string& content) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    out.flush();
    TESSERA_CHECK(out.good(), kIo, "cannot write '{}'", tmp.string());
  }
  fs::rename(tmp, path);
}

// Shard s of the requests [start, total) cut into `shards`: lines [lo, hi).
struct ShardLines {
  int64_t lo, hi;
};
ShardLines shard_lines(int64_t start, int64_t total, int64_t shards, int64_t s) {
  return {start + s * (total - start) / shards, start + (s + 1) * (total - start) / shards};
}

fs::path shard_path(const fs::path& parts, int64_t s) { return parts / fmt::format("shard-{:05d}.jsonl", s); }

// Rank 0: the plan of this job, made now or kept from an interrupted run;
// {"finished": true} when the output is already complete.
json make_plan(const ShardedJobOptions& opt, const std::vector<std::string>& lines, const fs::path& parts,
               int ranks) {
  const int64_t total = static_cast<int64_t>(lines.size());
  const int64_t done = count_done_lines(opt.job.output_path);
  if (done >= total) {
    fs::remove_all(parts);  // a run that merged but was stopped before cleaning up
    return {{"finished", true}, {"total", total}};
  }
  const std::string digest = digest_of(lines);
  const fs::path plan_path = parts / "plan.json";
  if (fs::exists(plan_path)) {
    std::ifstream in(plan_path);
    const json plan = json::parse(in, nullptr, /*allow_exceptions=*/false);
    TESSERA_CHECK(plan.is_object() && plan.value("digest", "") == digest && plan.value("total", -1) == total, kInvalidArgument,
                  "'{}' holds shards of another input (or is damaged); remove it to start the job over", parts.string());
    TESSERA_CHECK(plan.value("start", -1) == done, kInvalidArgument,
                  "'{}' has {} complete results but the shards in '{}' continue from {}; remove one of them",
                  opt.job.output_path, done, parts.string(), plan.value("start", -1));
    TESSERA_LOG_INFO("batch: resuming the {} shards in '{}'", plan.value("shards", 0), parts.string());
    return plan;
  }
  const int64_t wanted = opt.shards > 0 ? opt.shards : 4 * static_cast<int64_t>(ranks);
  const json plan = {{"total", total}, {"start", done}, {"digest", digest},
                     {"shards", std::clamp<int64_t>(wanted, 1, total - done)}};
  fs::create_directories(parts);
  write_file_atomically(plan_path, plan.dump() + "\n");
  return plan;
}

// Rank 0, every shard complete: OUTPUT gains the shards in order.
void merge(const ShardedJobOptions& opt, const fs::path& parts, int64_t start, int64_t total, int64_t shards) {
  const fs::path output = opt.job.output_path, tmp = output.string() + ".merging";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (fs::exists(output)) out << std::ifstream(output, std::ios::binary).rdbuf();  // its complete lines
    for (int64_t s = 0; s < shards; ++s) {
      const auto [lo, hi] = shard_lines(start, total, shards, s);
      const fs::path p = shard_path(parts, s);
      TESSERA_CHECK(count_done_lines(p) == hi - lo, kInternal, "shard {} ('{}') is incomplete after every rank finished",
                    s, p.string());
      out << std::ifstream(p, std::ios::binary).rdbuf();
    }
    out.flush();
    TESSERA_CHECK(out.good(), kIo, "cannot write '{}'", tmp.string());
  }
  fs::rename(tmp, output);
  fs::remove_all(parts);
}

}  // namespace

ShardedJobResult run_sharded_batch_job(engine::Engine& eng, dist::World& world, const ShardedJobOptions& opt) {
  const auto t0 = engine::Clock::now();
  const std::vector<std::string> lines = read_request_lines(opt.job.input_path);
  const fs::path parts = opt.job.output_path + ".parts";
  const json plan =
      json::parse(world.broadcast(world.rank() == 0 ? make_plan(opt, lines, parts, world.size()).dump() : "", 0));
  ShardedJobResult r;
  r.totals.total = static_cast<int64_t>(lines.size());
  if (plan.value("finished", false)) {
    r.totals.skipped = r.totals.total;
    return r;
  }
  const int64_t start = plan.at("start"), total = plan.at("total");
  r.shards = plan.at("shards");
  TESSERA_CHECK(total == r.totals.total, kInvalidArgument, "the ranks read different inputs ({} and {} requests)", total,
                r.totals.total);
  int64_t sums[5] = {world.rank() == 0 ? start : 0, 0, 0, 0, 0};  // skipped, completed, failed, tokens, shards skipped
  for (int64_t s = world.rank(); s < r.shards; s += world.size()) {
    const auto [lo, hi] = shard_lines(start, total, r.shards, s);
    const BatchJobResult b = run_batch_lines(eng, std::span<const std::string>(lines).subspan(lo, hi - lo), lo,
                                             shard_path(parts, s).string(), opt.job);
    sums[0] += b.skipped;
    sums[1] += b.completed;
    sums[2] += b.failed;
    sums[3] += b.output_tokens;
    sums[4] += b.skipped == b.total ? 1 : 0;
  }
  world.barrier();  // sleeps, where the all-reduce would spin a core that others need
  world.all_reduce_sum(sums);
  if (world.rank() == 0) merge(opt, parts, start, total, r.shards);
  r.totals.skipped = sums[0];
  r.totals.completed = sums[1];
  r.totals.failed = sums[2];
  r.totals.output_tokens = sums[3];
  r.shards_skipped = sums[4];
  r.totals.seconds = std::chrono::duration<double>(engine::Clock::now() - t0).count();
  return r;
}

}  // namespace tessera::server
