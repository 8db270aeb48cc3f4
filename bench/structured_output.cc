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
#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "core/error.h"
#include "format/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
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

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
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
