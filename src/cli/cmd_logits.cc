// tessera logits: evaluate token ids and dump the logits, so an independent
// implementation (tests/reference/) can be compared against this one.
#include <fmt/format.h>

#include <cstdio>
#include <sstream>

#include "cli/command.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "engine/sequence_runner.h"
#include "model/model.h"

namespace tessera::cli {
namespace {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      TESSERA_CHECK(used == item.size(), kInvalidArgument, "bad token id '{}'", item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::logic_error&) {
      fail(ErrorCode::kInvalidArgument, "bad token id '{}'", item);
    }
  }
  TESSERA_CHECK(!ids.empty(), kInvalidArgument, "no token ids given");
  return ids;
}

struct LogitsArgs {
  std::string model, tokens, out, kv_type = "f32", long_rope = "sequence";
  int threads = 0;
  int64_t batch = 512;
  int64_t ctx = 0;          // 0: the number of tokens
  int64_t decode_from = -1;  // >= 0: tokens from this one on appended one at a time
  AdapterOptions adapters;
};

TESSERA_COMMAND("logits", "Evaluate token ids; write every position's logits (f32) to a file", [](CLI::App& sub) {
  auto a = std::make_shared<LogitsArgs>();
  sub.add_option("-m,--model", a->model, "GGUF model")->required();
  sub.add_option("--tokens", a->tokens, "Comma-separated token ids")->required();
  sub.add_option("-o,--out", a->out, "Raw little-endian f32 [n_tokens, n_vocab]; without it, argmax per row as JSON");
  sub.add_option("-t,--threads", a->threads, kThreadsHelp);
  sub.add_option("-b,--batch", a->batch, "Tokens per forward pass")->capture_default_str();
  sub.add_option("--kv-type", a->kv_type, "KV cache type: f32, f16, bf16, q8_0, q4_0")->capture_default_str();
  sub.add_option("-c,--ctx", a->ctx, "Context length (default: the number of tokens)");
  sub.add_option("--decode-from", a->decode_from,
                 "Append the tokens from this index on one at a time (a decode), the ones before in -b chunks");
  add_long_rope_option(sub, a->long_rope);
  a->adapters.add_to(sub, AdapterScope::kSequence);
  return [a]() {
    const LoadedModel lm = load_model(a->model);
    const std::vector<int32_t> ids = parse_ids(a->tokens);
    auto kv = parse_dtype(a->kv_type);
    TESSERA_CHECK(kv.has_value(), kInvalidArgument, "unknown KV type '{}'", a->kv_type);
    ThreadPool pool(a->threads);
    const std::shared_ptr<const LoraAdapter> lora = a->adapters.load(*lm.model);
    const int64_t n = static_cast<int64_t>(ids.size());
    TESSERA_CHECK(a->ctx == 0 || a->ctx >= n, kInvalidArgument, "--ctx {} is shorter than the {} tokens", a->ctx, n);
    engine::SequenceRunner runner(*lm.model,
                                  {.n_ctx = a->ctx > 0 ? a->ctx : n, .kv_type = *kv, .max_batch_tokens = a->batch,
                                   .lora = lora.get(), .long_rope = parse_long_rope(a->long_rope)},
                                  pool);
    const int64_t V = lm.model->config().n_vocab;
    std::vector<float> logits;
    const int64_t split = a->decode_from < 0 ? n : std::min(a->decode_from, n);
    if (split > 0) {
      const auto rows = runner.append(std::span(ids).first(static_cast<size_t>(split)), /*all_logits=*/true);
      logits.assign(rows.begin(), rows.end());
    }
    for (int64_t t = split; t < n; ++t) {
      const auto row = runner.append(std::span(ids).subspan(static_cast<size_t>(t), 1));
      logits.insert(logits.end(), row.begin(), row.end());
    }
    if (!a->out.empty()) {
      std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(a->out.c_str(), "wb"), &std::fclose);
      TESSERA_CHECK(f != nullptr, kIo, "cannot write '{}'", a->out);
      TESSERA_CHECK(std::fwrite(logits.data(), sizeof(float), logits.size(), f.get()) == logits.size(), kIo,
                    "write to '{}' failed", a->out);
    } else {
      std::string s = "[";
      for (size_t t = 0; t < ids.size(); ++t) {
        const float* row = logits.data() + t * V;
        int64_t best = 0;
        for (int64_t i = 1; i < V; ++i) if (row[i] > row[best]) best = i;
        s += fmt::format("{}{}", t ? "," : "", best);
      }
      std::printf("%s]\n", s.c_str());
    }
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
