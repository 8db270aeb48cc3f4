// bench/submit_stall: do large prompts arriving stall the streams already
// running? 32 streams decode on an AsyncEngine while another thread
// submits `--big` prompts of `--mib` MiB of text each (a bounded kv_policy
// makes them admissible; each is aborted at once, so only its submission
// is measured). Prints JSON: the gaps between the streams' outputs (p50,
// p99, max) with and without the big submissions, the time submit() took,
// and the time Engine::prepare takes for one big prompt — the work that
// AsyncEngine::submit held its lock for before it ran outside it (the
// engine thread needs that lock to deliver every token).
//
//   tessera_submit_stall_bench --model F [--mib 1] [--big 8] [--streams 32] [--threads 1]
#include <algorithm>
#include <chrono>
#include <thread>

#include "bench/bench_util.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "server/async_engine.h"
#include "server/metrics.h"

using namespace tessera;

namespace {

using Clock = std::chrono::steady_clock;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// Runs `streams` greedy streams to the end; `during` runs meanwhile.
// Returns every gap (ms) between consecutive outputs of a stream.
std::vector<double> stream_gaps(server::AsyncEngine& async, const Tokenizer& tok, int streams,
                                const std::function<void()>& during) {
  std::vector<std::shared_ptr<server::RequestChannel>> chans;
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 400;
  p.ignore_eos = true;
  for (int i = 0; i < streams; ++i) {
    engine::PromptLayout l;
    l.tokens = tok.encode("Once upon a time, " + std::to_string(i), true);
    chans.push_back(async.submit({std::move(l)}, p));
  }
  std::vector<std::vector<double>> gaps(static_cast<size_t>(streams));
  std::vector<std::thread> readers;
  for (int i = 0; i < streams; ++i) {
    readers.emplace_back([&, i] {
      std::vector<server::ChannelItem> items;
      auto last = Clock::now();
      bool started = false;
      for (;;) {
        const bool finished = chans[i]->finished();
        items.clear();
        chans[i]->wait(items, std::chrono::milliseconds(100));
        if (!items.empty()) {
          const auto now = Clock::now();
          if (started) gaps[i].push_back(ms(now - last));
          started = true;
          last = now;
        }
        if (finished) break;
      }
    });
  }
  during();
  for (std::thread& t : readers) t.join();
  std::vector<double> all;
  for (const auto& g : gaps) all.insert(all.end(), g.begin(), g.end());
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const std::string path = args.str("model");
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s --model FILE [--mib 1] [--big 8] [--streams 32] [--threads 1]\n", argv[0]);
    return 1;
  }
  const LoadedModel lm = load_model(path);
  const auto tok = load_tokenizer(lm);
  engine::EngineConfig ec;
  ec.threads = static_cast<int>(args.num("threads", 1));
  ec.max_num_seqs = 64;
  engine::Engine eng(*lm.model, tok.get(), ec);
  server::Metrics metrics;
  server::AsyncEngine async(eng, metrics, 256);
  const int streams = static_cast<int>(args.num("streams", 32));
  const int big = static_cast<int>(args.num("big", 8));
  const double mib = static_cast<double>(args.num("mib", 1));

  // The big prompt, tokenized once (an HTTP handler tokenizes on its own thread).
  std::string text;
  const std::string piece = "The little dog ran to the park and played with a red ball. ";
  while (text.size() < static_cast<size_t>(mib * 1024 * 1024)) text += piece;
  const std::vector<int32_t> big_tokens = tok->encode(text, true);
  engine::SamplingParams bp;
  bp.max_tokens = 16;
  bp.kv_policy.kind = kv::KvPolicyKind::kSink;
  bp.kv_policy.budget = 256;
  const auto tp = Clock::now();
  engine::PreparedRequest probe = eng.prepare(big_tokens, bp);
  const double prepare_ms = ms(Clock::now() - tp);

  const std::vector<double> quiet = stream_gaps(async, *tok, streams, [] {});
  std::vector<double> submit_ms;
  const std::vector<double> loaded = stream_gaps(async, *tok, streams, [&] {
    for (int i = 0; i < big; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      engine::PromptLayout l;
      l.tokens = big_tokens;
      const auto t0 = Clock::now();
      auto ch = async.submit({std::move(l)}, bp);
      submit_ms.push_back(ms(Clock::now() - t0));
      async.abort(*ch);
    }
  });
  auto summary = [](const std::vector<double>& g) {
    return nlohmann::json{{"n", g.size()}, {"p50_ms", quantile(g, 0.5)}, {"p99_ms", quantile(g, 0.99)},
                          {"max_ms", g.empty() ? 0.0 : *std::max_element(g.begin(), g.end())}};
  };
  nlohmann::json out = {{"bench", "submit_stall"},
                        {"model", path},
                        {"streams", streams},
                        {"big_prompts", big},
                        {"big_prompt_bytes", text.size()},
                        {"big_prompt_tokens", big_tokens.size()},
                        {"prepare_ms", prepare_ms},
                        {"submit_ms_max", submit_ms.empty() ? 0.0 : *std::max_element(submit_ms.begin(), submit_ms.end())},
                        {"gaps_quiet", summary(quiet)},
                        {"gaps_with_big_submissions", summary(loaded)}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
