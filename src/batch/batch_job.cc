#include "batch/batch_job.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/tokenizer.h"
#include "server/sampling_json.h"

namespace tessera::server {
namespace {

using nlohmann::json;

}  // namespace

std::vector<std::string> read_request_lines(const std::string& path) {
  std::ifstream in(path);
  TESSERA_CHECK(in.good(), kIo, "cannot open '{}'", path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    lines.push_back(line);
  }
  return lines;
}

int64_t count_done_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return 0;
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int64_t done = 0;
  size_t good_end = 0, pos = 0;
  while (pos < content.size()) {
    const size_t nl = content.find('\n', pos);
    if (nl == std::string::npos) break;  // no newline: interrupted mid-line
    if (!json::accept(content.substr(pos, nl - pos))) break;
    ++done;
    good_end = nl + 1;
    pos = nl + 1;
  }
  if (good_end != content.size()) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(good_end));
  }
  return done;
}

namespace {

struct Pending {
  json result;
  bool done = false;
  std::vector<int32_t> tokens;
  std::string text;
};

}  // namespace

BatchJobResult run_batch_job(engine::Engine& eng, const BatchJobOptions& opt) {
  const std::vector<std::string> lines = read_request_lines(opt.input_path);
  return run_batch_lines(eng, lines, 0, opt.output_path, opt);
}

BatchJobResult run_batch_lines(engine::Engine& eng, std::span<const std::string> lines, int64_t first_index,
                               const std::string& output_path, const BatchJobOptions& opt) {
  const auto t0 = engine::Clock::now();
  BatchJobResult res;
  res.total = static_cast<int64_t>(lines.size());
  res.skipped = std::min<int64_t>(count_done_lines(output_path), res.total);
  if (res.skipped > 0 && res.skipped < res.total) {
    TESSERA_LOG_INFO("batch: {} of {} requests already done, resuming", res.skipped, res.total);
  }
  std::ofstream out(output_path, std::ios::binary | std::ios::app);
  TESSERA_CHECK(out.good(), kIo, "cannot write '{}'", output_path);

  std::map<int64_t, Pending> pending;  // by input index
  int64_t next_submit = res.skipped, next_write = res.skipped;
  auto flush_ready = [&] {
    for (auto it = pending.find(next_write); it != pending.end() && it->second.done; it = pending.find(next_write)) {
      out << it->second.result.dump() << '\n';
      out.flush();
      pending.erase(it);
      ++next_write;
    }
  };
  while (next_write < res.total) {
    while (next_submit < res.total && static_cast<int64_t>(pending.size()) < opt.max_in_flight) {
      const int64_t idx = next_submit++;
      const int64_t line_no = first_index + idx + 1;
      Pending& p = pending[idx];
      p.result = {{"index", first_index + idx}};
      try {
        const json req = json::parse(lines[idx]);
        if (req.contains("id")) p.result["id"] = req["id"];
        if (!req.is_object() || !req.contains("prompt") || !req["prompt"].is_string()) {
          throw FieldError("prompt", "each line needs a string field 'prompt'");
        }
        engine::SamplingParams sp = parse_sampling(req, {.temperature = 1.0f, .max_tokens = opt.default_max_tokens});
        sp.n = 1;
        eng.add_request(req["prompt"].get<std::string>(), sp, [&pending, idx](const engine::RequestOutput& o) {
          Pending& q = pending[idx];
          q.tokens.insert(q.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
          q.text += o.text;
          if (!o.finished) return;
          q.result["text"] = q.text;
          q.result["tokens"] = q.tokens;
          q.result["finish_reason"] = engine::finish_reason_name(o.finish_reason);
          q.result["prompt_tokens"] = o.num_prompt_tokens;
          q.result["completion_tokens"] = o.num_output_tokens;
          q.result["time_to_first_token_s"] = o.time_to_first_token;
          q.result["latency_s"] = o.elapsed;
          q.done = true;
        });
      } catch (const json::exception& e) {
        p.result["error"] = fmt::format("line {}: invalid JSON: {}", line_no, e.what());
        p.done = true;
      } catch (const FieldError& e) {
        p.result["error"] = fmt::format("line {}: {}", line_no, e.what());
        p.done = true;
      } catch (const Error& e) {
        p.result["error"] = fmt::format("line {}: {}", line_no, e.what());
        p.done = true;
      }
      if (p.result.contains("error")) ++res.failed;
    }
    flush_ready();
    if (next_write >= res.total) break;
    for (const engine::RequestOutput& o : eng.step()) {
      if (o.finished) {
        ++res.completed;
        res.output_tokens += o.num_output_tokens;
      }
    }
  }
  flush_ready();
  TESSERA_CHECK(out.good(), kIo, "cannot write '{}'", output_path);
  res.seconds = std::chrono::duration<double>(engine::Clock::now() - t0).count();
  return res;
}

}  // namespace tessera::server
