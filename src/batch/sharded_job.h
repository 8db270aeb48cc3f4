// `mpirun -np N tessera batch`: one batch job split across ranks, in
// MapReduce's shape. The requests not yet in the output are cut into shards
// of contiguous lines (more shards than ranks); shard s goes to rank s mod N,
// which runs it as a resumable batch job of its own into OUTPUT.parts/.
// When every rank is done, rank 0 appends the shards to OUTPUT in input
// order and removes OUTPUT.parts/.
//
// Resuming: the plan (where the sharded part starts, how many shards, a
// digest of the input) is kept in OUTPUT.parts/plan.json; a rerun after any
// failure (any number of ranks, or none) keeps the plan, skips the shards
// that are complete, and resumes the others from their last complete line.
// A plan made for another input is refused, never mixed.
//
// The output is the one a single process writes, line for line, except the
// per-request timings (time_to_first_token_s, latency_s): results depend on
// the request alone (the engine is batch-invariant; sampling draws from the
// request's seed).
#pragma once

#include <cstdint>

#include "batch/batch_job.h"
#include "dist/world.h"

namespace tessera::server {

struct ShardedJobOptions {
  BatchJobOptions job;
  int64_t shards = 0;  // 0: 4 per rank; kept from the plan on a rerun
};

struct ShardedJobResult {
  BatchJobResult totals;     // summed over ranks (seconds: this rank's wall time)
  int64_t shards = 0;
  int64_t shards_skipped = 0;  // complete before this run, over all ranks
};

// Every rank of world calls it with the same options.
ShardedJobResult run_sharded_batch_job(engine::Engine& engine, dist::World& world, const ShardedJobOptions& options);

}  // namespace tessera::server
