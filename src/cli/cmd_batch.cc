// tessera batch: offline JSONL in, JSONL out (see batch/batch_job.h).
#include "cli/command.h"
#include "cli/common_options.h"
#include "core/log.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "batch/batch_job.h"
#include "batch/sharded_job.h"
#include "dist/world.h"

#include <algorithm>
#include <filesystem>

namespace tessera::cli {
namespace {

struct BatchArgs {
  RunOptions run;
  SpecOptions spec;
  AdapterOptions adapters;
  server::BatchJobOptions job;
  int64_t shards = 0;
};

TESSERA_COMMAND("batch", "Run a JSONL file of requests offline (resumable)", [](CLI::App& sub) {
  auto a = std::make_shared<BatchArgs>();
  a->run.add_to(sub);
  a->spec.add_to(sub);
  a->adapters.add_to(sub, AdapterScope::kEngine);
  sub.add_option("-i,--input", a->job.input_path, "Requests, one JSON object per line")->required();
  sub.add_option("-o,--output", a->job.output_path, "Results, one JSON object per line, in input order")->required();
  sub.add_option("--default-max-tokens", a->job.default_max_tokens, "max_tokens when a line has none")->capture_default_str();
  sub.add_option("--shards", a->shards,
                 "Split the job into N resumable shards (default under mpirun: 4 per rank; ranks take shard s mod ranks)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  return [a]() {
    dist::World& world = dist::World::current();
    const bool sharded = world.distributed() && a->run.tp == 1;  // under --tp the ranks hold one model
    if (sharded && a->run.threads == 0) a->run.threads = world.threads_per_rank();
    const LoadedModel lm = a->run.load();
    const auto tok = load_tokenizer(lm);
    engine::EngineConfig ec = a->run.engine_config(lm);
    a->spec.apply(ec, *lm.model);
    a->adapters.apply(ec, *lm.model);
    engine::Engine eng(*lm.model, tok.get(), ec);
    // Sharded when launched as ranks, asked to, or resuming shards a sharded
    // run left (with any number of ranks).
    if (sharded || a->shards > 0 || std::filesystem::exists(a->job.output_path + ".parts")) {
      const server::ShardedJobResult sr = server::run_sharded_batch_job(eng, world, {.job = a->job, .shards = a->shards});
      const server::BatchJobResult& r = sr.totals;
      if (world.rank() == 0) {
        TESSERA_LOG_INFO("batch: {} requests, {} ranks, {} shards ({} complete before this run); {} skipped "
                         "(already done), {} computed, {} rejected; {} output tokens in {:.2f} s ({:.1f} tokens/s)",
                         r.total, world.size(), sr.shards, sr.shards_skipped, r.skipped, r.completed, r.failed,
                         r.output_tokens, r.seconds, r.output_tokens / std::max(r.seconds, 1e-9));
      }
      return r.failed > 0 ? 2 : 0;
    }
    const server::BatchJobResult r = server::run_batch_job(eng, a->job);
    TESSERA_LOG_INFO("batch: {} requests, {} skipped (already done), {} computed, {} rejected; {} output tokens in "
                     "{:.2f} s ({:.1f} tokens/s)",
                     r.total, r.skipped, r.completed, r.failed, r.output_tokens, r.seconds,
                     r.output_tokens / std::max(r.seconds, 1e-9));
    return r.failed > 0 ? 2 : 0;
  };
});

}  // namespace
}  // namespace tessera::cli
