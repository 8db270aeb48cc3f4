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
  std::string model, tokens, out, kv_type = "f32";
  int threads = 0;
  int64_t batch = 512;
  AdapterOptions adapters;
};

TESSERA_COMMAND("logits", "Evaluate token ids; write every position's logits (f32) to a file", [](CLI::App& sub) {
  auto a = std::make_shared<LogitsArgs>();
  sub.add_option("-m,--model", a->model, "GGUF model")->required();
  sub.add_option("--tokens", a->tokens, "Comma-separated token ids")->required();
  sub.add_option("-o,--out", a->out, "Raw little-endian f32 [n_tokens, n_vocab]; without it, argmax per row as JSON");
  sub.add_option("-t,--threads", a->threads, kThreadsHelp);
  sub.add_option("-b,--batch", a->batch, "Tokens per forward pass")->capture_default_str();
  sub.add_option("--kv-type", a->kv_type, "KV cache type: f32, f16, bf16")->capture_default_str();
  a->adapters.add_to(sub, AdapterScope::kSequence);
  return [a]() {
    const LoadedModel lm = load_model(a->model);
    const std::vector<int32_t> ids = parse_ids(a->tokens);
    auto kv = parse_dtype(a->kv_type);
    TESSERA_CHECK(kv.has_value(), kInvalidArgument, "unknown KV type '{}'", a->kv_type);
    ThreadPool pool(a->threads);
    const std::shared_ptr<const LoraAdapter> lora = a->adapters.load(*lm.model);
    engine::SequenceRunner runner(*lm.model,
                                  {.n_ctx = static_cast<int64_t>(ids.size()), .kv_type = *kv, .max_batch_tokens = a->batch,
                                   .lora = lora.get()},
                                  pool);
    const auto logits = runner.append(ids, /*all_logits=*/true);
    const int64_t V = lm.model->config().n_vocab;
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
