// bench/structured_output: the cost of structured output per token, as
// MaskBench measures it: for each schema of a set, compile it, then walk a
// valid instance's tokens, timing the mask computed before each token (one
// thread). Prints JSON: compile time median, mask time mean / p50 / p99 /
// max, over all tokens of all schemas.
//
// The lexer and its per-state mask cache are shared by every schema, as in
// the engine (one per tokenizer); `--cold` gives each schema a fresh masker,
// which is the worst case (a server's first request with a new tokenizer).
//
//   tessera_structured_output_bench --tokenizer tokenizer.json|model.gguf
//       [--schemas bench/data/schemas_bench.jsonl] [--cold] [--limit N]
//
// With --model, end to end instead: decode tokens/s of the engine at batch 1
// and 32 with a schema (an array of at least 200 strings, so that no
// request ends before max_tokens) against the same requests unconstrained,
// alternating, sampled at temperature 1.
//
//   tessera_structured_output_bench --model M.gguf [--threads 2] [--max-tokens 128] [--rounds 3]
#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "core/cpu.h"
#include "core/error.h"
#include "format/gguf.h"
#include "grammar/json_schema.h"
#include "engine/engine.h"
#include "grammar/matcher.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") {
    const auto f = gguf::File::open(path);
    return Tokenizer::from_gguf(f);
  }
  return Tokenizer::from_hf_json(path);
}

}  // namespace

// Decode tokens/s of `batch` requests, constrained or not.
double decode_tps(engine::Engine& e, const Tokenizer& tok, int batch, int max_tokens,
                  std::shared_ptr<const grammar::Constraint> c, uint64_t seed) {
  const std::vector<int32_t> prompt = tok.encode("Here is the list in JSON:", true);
  for (int i = 0; i < batch; ++i) {
    engine::SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed + static_cast<uint64_t>(i);
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.constraint = c;
    e.add_request(prompt, p);
  }
  int64_t tokens = 0;
  auto t0 = Clock::now();
  bool first = true;
  while (e.has_unfinished()) {
    for (const auto& o : e.step()) {
      if (first && !o.new_tokens.empty()) {
        // Time decode only: from the step that produced first tokens.
        first = false;
        t0 = Clock::now();
        continue;
      }
      tokens += static_cast<int64_t>(o.new_tokens.size());
    }
  }
  return static_cast<double>(tokens) / (us_since(t0) / 1e6);
}

int run_e2e(const bench::Args& args) {
  const std::string path = args.str("model");
  const LoadedModel lm = load_model(path);
  const auto tok = load_tokenizer(lm);
  const int max_tokens = static_cast<int>(args.num("max-tokens", 128));
  const int rounds = static_cast<int>(args.num("rounds", 3));
  const auto schema = grammar::compile_json_schema(nlohmann::ordered_json::parse(
      R"({"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 200})"));
  engine::EngineConfig cfg;
  cfg.threads = static_cast<int>(args.num("threads", 2));
  cfg.max_num_seqs = 32;
  cfg.max_model_len = 512;
  cfg.seed = 1;
  engine::Engine e(*lm.model, tok.get(), cfg);
  nlohmann::ordered_json out = {{"bench", "structured_output_e2e"}, {"model", path}, {"threads", cfg.threads},
                                {"max_tokens", max_tokens},
                                {"schema", "array of >= 200 strings of <= 40 characters"},
                                {"isa", std::string(isa_name(active_isa()))}};
  for (const int batch : {1, 32}) {
    std::vector<double> plain, constrained, ratio;
    decode_tps(e, *tok, batch, 16, schema, 99);  // warm the masker's caches and the pool
    for (int r = 0; r < rounds; ++r) {
      plain.push_back(decode_tps(e, *tok, batch, max_tokens, nullptr, 1000 * r));
      constrained.push_back(decode_tps(e, *tok, batch, max_tokens, schema, 1000 * r));
      ratio.push_back(constrained.back() / plain.back());
    }
    out["batch_" + std::to_string(batch)] = {{"unconstrained_tps", plain}, {"constrained_tps", constrained},
                                             {"ratio", ratio}, {"ratio_median", percentile(ratio, 0.5)}};
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  if (!args.str("model").empty()) {
    try {
      return run_e2e(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  const std::string tok_path = args.str("tokenizer");
  if (tok_path.empty()) {
    std::fprintf(stderr, "usage: %s --tokenizer FILE [--schemas FILE.jsonl] [--cold] [--limit N]\n", argv[0]);
    return 1;
  }
  try {
    const auto tok = load_tokenizer(tok_path);
    const std::string set_path = args.str("schemas", "bench/data/schemas_bench.jsonl");
    const bool cold = args.flag("cold");
    const bool verbose = args.flag("verbose");  // the slow masks, to stderr
    const int64_t limit = args.num("limit", 1 << 30);
    std::ifstream in(set_path);
    if (!in) throw std::runtime_error("cannot read " + set_path);
    auto t0 = Clock::now();
    auto masker = grammar::make_token_masker(*tok);
    const double masker_ms = us_since(t0) / 1000.0;
    std::vector<double> compile_us, mask_us;
    int64_t schemas = 0, refused = 0, rejected_instances = 0;
    std::vector<std::string> refusals, rejections;
    std::vector<uint64_t> bits(masker->n_words());
    std::string line;
    while (std::getline(in, line) && schemas + refused < limit) {
      if (line.empty()) continue;
      const auto row = nlohmann::ordered_json::parse(line);
      if (cold) masker = grammar::make_token_masker(*tok);  // not timed: the tokenizer's, built once per server
      t0 = Clock::now();
      std::shared_ptr<const grammar::Constraint> c;
      try {
        c = grammar::compile_json_schema(row["schema"]);
      } catch (const Error& e) {
        ++refused;
        if (refusals.size() < 10) refusals.push_back(row.value("name", std::to_string(row.value("id", 0))) + ": " + e.what());
        continue;
      }
      grammar::Matcher m(c, *masker);
      compile_us.push_back(us_since(t0));
      ++schemas;
      // The instance as the spaced grammar writes it (Python's json.dumps).
      std::string out;
      {
        // ordered dump with ", " and ": "
        std::function<void(const nlohmann::ordered_json&)> w = [&](const nlohmann::ordered_json& v) {
          if (v.is_object()) {
            out += '{';
            bool first = true;
            for (const auto& [k, x] : v.items()) {
              if (!first) out += ", ";
              first = false;
              out += nlohmann::ordered_json(k).dump() + ": ";
              w(x);
            }
            out += '}';
          } else if (v.is_array()) {
            out += '[';
            for (size_t i = 0; i < v.size(); ++i) {
              if (i) out += ", ";
              w(v[i]);
            }
            out += ']';
          } else {
            out += v.dump();
          }
        };
        w(row["instance"]);
      }
      const std::vector<int32_t> ids = tok->encode(out, false);
      bool ok = true;
      std::string prefix;
      for (const int32_t id : ids) {
        t0 = Clock::now();
        m.fill_mask(bits);
        mask_us.push_back(us_since(t0));
        if (verbose && mask_us.back() > 400) {
          std::fprintf(stderr, "%8.0f us  %s | ...%s\n", mask_us.back(), row.value("name", std::string()).c_str(),
                       prefix.substr(prefix.size() > 60 ? prefix.size() - 60 : 0).c_str());
        }
        if (!grammar::test_bit(bits, id) || !m.accept(id)) {
          ok = false;
          break;
        }
        prefix += tok->token_to_piece(id);
      }
      t0 = Clock::now();
      m.fill_mask(bits);
      mask_us.push_back(us_since(t0));
      if (!ok || !m.can_end()) {
        ++rejected_instances;
        if (rejections.size() < 10) rejections.push_back(std::to_string(row.value("id", 0)) + ": after '" + prefix + "'");
      }
    }
    double mean = 0;
    for (const double x : mask_us) mean += x;
    mean /= std::max<size_t>(1, mask_us.size());
    nlohmann::ordered_json j = {
        {"bench", "structured_output"},
        {"tokenizer", tok_path},
        {"n_vocab", tok->n_vocab()},
        {"schemas", set_path},
        {"cache", cold ? "cold (fresh masker per schema)" : "shared across schemas"},
        {"threads", 1},
        {"schemas_compiled", schemas},
        {"schemas_refused", refused},
        {"refusals", refusals},
        {"instances_rejected", rejected_instances},
        {"rejections", rejections},
        {"masker_build_ms", masker_ms},
        {"compile_us_median", percentile(compile_us, 0.5)},
        {"compile_us_p99", percentile(compile_us, 0.99)},
        {"tokens", mask_us.size()},
        {"mask_us_mean", mean},
        {"mask_us_p50", percentile(mask_us, 0.5)},
        {"mask_us_p99", percentile(mask_us, 0.99)},
        {"mask_us_max", percentile(mask_us, 1.0)},
        {"lexer_states", masker->lexer().num_states()},
        {"cached_state_masks", masker->cached_states()},
    };
    std::printf("%s\n", j.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
