// Offline batch mode (`tessera batch`): a JSONL file of requests in, a JSONL
// file of results out, in input order. Resumable: results are appended in
// input order as they become contiguous, so after an interruption the output
// holds a prefix of complete lines; a re-run keeps those, drops a partial
// last line, and computes only the rest.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace tessera::server {

struct BatchJobOptions {
  std::string input_path;
  std::string output_path;
  int32_t default_max_tokens = 128;
  int64_t max_in_flight = 256;  // requests queued in the engine at once
};

struct BatchJobResult {
  int64_t total = 0;       // requests in the input
  int64_t skipped = 0;     // already in the output file
  int64_t completed = 0;   // computed by this run
  int64_t failed = 0;      // rejected (their line carries an "error")
  int64_t output_tokens = 0;
  double seconds = 0.0;
};

BatchJobResult run_batch_job(engine::Engine& engine, const BatchJobOptions& options);

// The pieces run_batch_job is made of, for jobs split into shards
// (batch/sharded_job.h).
//
// The request lines of a JSONL file (blank lines skipped).
std::vector<std::string> read_request_lines(const std::string& path);
// Complete result lines at the head of path (0 when absent); a partial last
// line is cut off the file.
int64_t count_done_lines(const std::string& path);
// Runs lines[done..] (done: complete lines already in output_path), appending
// results in order; each result's "index" (and an error's line number) is
// first_index + its position in lines.
BatchJobResult run_batch_lines(engine::Engine& engine, std::span<const std::string> lines, int64_t first_index,
                               const std::string& output_path, const BatchJobOptions& options);

}  // namespace tessera::server
