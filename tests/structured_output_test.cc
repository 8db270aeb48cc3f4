// Structured output end to end (issue 37's property test): random JSON
// Schemas (tests/grammar/gen_schemas.py) over the features
// grammar/json_schema.h covers, sampled at temperature 1 from random-weight
// models of two vocabularies (stories260K's SentencePiece, and Qwen 3's
// 151k byte-level BPE from its tokenizer.json, the largest byte-level
// vocabulary in ../shared), all at once through the engine's continuous
// batching. Every output must be a JSON text that Debian's python3-jsonschema
// validates against its schema (tests/grammar/validate_outputs.py), every
// request must end by the grammar's end (finish "stop", never "length" or an
// error: a dead end, a step where every token is masked, would be an error).
//
// TESSERA_SO_SCHEMAS sets the number of schemas per vocabulary (default 500).
#include <chrono>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "grammar/json_schema.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/test_util.h"

namespace tessera::engine {
namespace {

int num_schemas() {
  const char* e = std::getenv("TESSERA_SO_SCHEMAS");
  return e != nullptr ? std::atoi(e) : 500;
}

int run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

std::vector<nlohmann::ordered_json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::ordered_json> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::ordered_json::parse(line));
  }
  return rows;
}

void sample_and_validate(const std::string& model_path, const std::string& tag, uint64_t seed, int32_t max_string) {
  const std::string dir = testing::temp_dir();
  const std::string schemas = dir + "/schemas.jsonl";
  ASSERT_EQ(run(fmt::format("/usr/bin/python3 {}/tests/grammar/gen_schemas.py --seed {} --count {} --out {}",
                            TESSERA_SOURCE_DIR, seed, num_schemas(), schemas)),
            0);
  const auto rows = read_jsonl(schemas);
  ASSERT_EQ(static_cast<int>(rows.size()), num_schemas());

  const LoadedModel lm = load_model(model_path);
  const auto tok = load_tokenizer(lm);
  EngineConfig cfg;
  cfg.max_model_len = 4096;
  cfg.max_num_seqs = 64;
  cfg.threads = 2;
  cfg.kv_type = DType::kF32;
  Engine e(*lm.model, tok.get(), cfg);
  std::map<RequestId, size_t> row_of;
  const std::vector<int32_t> prompt = tok->encode("Answer in JSON:", true);
  for (size_t i = 0; i < rows.size(); ++i) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed * 100000 + i;
    p.max_tokens = 4000;
    // A random model puts little of its mass on tokens that close a string
    // (with 151k tokens, a few hundredths of a percent): strings the schema
    // leaves unbounded are capped (JsonSchemaOptions::max_string_length, a
    // subset of the valid outputs), or they would run past any max_tokens.
    // Every generated schema is within what the compiler covers. Strict
    // (OpenAI's json_schema.strict): objects that list properties and say
    // nothing of others get no extra keys. Under JSON Schema's default they
    // would, and a random model writes keys thousands of tokens long: valid,
    // but past any max_tokens. grammar_test covers the default.
    grammar::JsonSchemaOptions o;
    o.strict = true;
    o.max_string_length = max_string;
    ASSERT_NO_THROW(p.constraint = grammar::compile_json_schema(rows[i]["schema"], o)) << rows[i].dump();
    row_of[e.add_request(prompt, p)] = i;
  }
  std::map<RequestId, std::string> text;
  std::map<RequestId, FinishReason> finish;
  std::map<RequestId, std::string> error;
  int64_t tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (e.has_unfinished()) {
    for (const RequestOutput& o : e.step()) {
      text[o.id] += o.text;
      tokens += static_cast<int64_t>(o.new_tokens.size());
      if (o.finished) {
        finish[o.id] = o.finish_reason;
        error[o.id] = o.error;
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %zu requests, %lld tokens in %.1f s (%.0f tokens/s)\n", tag.c_str(), rows.size(),
              static_cast<long long>(tokens), secs, static_cast<double>(tokens) / secs);
  const std::string outputs = dir + "/outputs.jsonl";
  {
    std::ofstream out(outputs);
    for (const auto& [id, i] : row_of) {
      nlohmann::ordered_json j = {{"id", rows[i]["id"]}, {"schema", rows[i]["schema"]}};
      if (finish[id] == FinishReason::kStop) {
        j["output"] = text[id];
      } else {
        j["error"] = fmt::format("finish {}: {}", finish_reason_name(finish[id]), error[id]);
        j["partial"] = text[id];
      }
      out << j.dump() << "\n";
    }
  }
  int stops = 0;
  for (const auto& [id, f] : finish) stops += f == FinishReason::kStop;
  EXPECT_EQ(stops, num_schemas()) << tag << ": every request ends at its grammar's end";
  const std::string report = dir + "/report.json";
  const int rc = std::system(fmt::format("/usr/bin/python3 {}/tests/grammar/validate_outputs.py {} > {}",
                                         TESSERA_SOURCE_DIR, outputs, report).c_str());
  EXPECT_EQ(rc, 0) << tag << ": " << testing::read_file(report);
  std::system(fmt::format("cp {} {} /tmp/so_last_{}/ 2>/dev/null", outputs, report, seed).c_str());
  const auto summary = nlohmann::json::parse(testing::read_file(report));
  EXPECT_EQ(summary["checked"], num_schemas()) << tag;
  EXPECT_EQ(summary["passed"], num_schemas()) << tag << ": " << summary.dump(1);
}

TEST(StructuredOutput, RandomSchemasValidateUnderSentencePiece) {
  const std::string model = testing::temp_dir() + "/r260.gguf";
  ASSERT_EQ(run(fmt::format("{}/tessera make-model --vocab-from {} --preset tiny --seed 3 -o {}", TESSERA_BINARY_DIR,
                            testing::stories260k_path(), model)),
            0);
  sample_and_validate(model, "stories260K vocabulary", 1, /*max_string=*/48);
}

TEST(StructuredOutput, RandomSchemasValidateUnderByteLevelBpe151k) {
  const std::string model = testing::temp_dir() + "/qwen3-random";
  ASSERT_EQ(run(fmt::format("{}/tessera make-model --format hf --tokenizer-from {} --preset tiny --arch qwen3 --type bf16 --seed 4 -o {}",
                            TESSERA_BINARY_DIR, testing::shared_path("models/tokenizers/qwen3"), model)),
            0);
  sample_and_validate(model, "Qwen 3 vocabulary", 2, /*max_string=*/48);
}

}  // namespace
}  // namespace tessera::engine

namespace tessera::engine {
namespace {

// Greedy constrained output is the same with speculative decoding (drafts
// trimmed to the grammar, each verify row masked after the previous row's
// token) as without; n > 1 samples fork the parser and each stays valid.
TEST(StructuredOutput, SpeculationAndForkedSamplesKeepTheGrammar) {
  const auto& s = testing::stories260k();
  // Four short strings: stories260K repeats itself inside them, which the
  // n-gram drafter proposes.
  const auto schema = grammar::compile_json_schema(nlohmann::ordered_json::parse(
      R"({"type": "array", "items": {"type": "string", "maxLength": 60}, "minItems": 4, "maxItems": 4})"));
  auto run = [&](spec::Method m, const SamplingParams& p, EngineStats* stats) {
    EngineConfig c;
    c.max_model_len = 512;
    c.threads = 2;
    c.kv_type = DType::kF32;
    c.seed = 42;
    c.spec_method = m;
    c.spec_k = 6;
    c.spec_adaptive = false;  // every proposal verified
    Engine e(*s.lm.model, s.tok.get(), c);
    e.add_request(std::string_view("Once upon a time"), p);
    std::map<int32_t, std::string> text;
    std::map<int32_t, FinishReason> finish;
    while (e.has_unfinished()) {
      for (const RequestOutput& o : e.step()) {
        text[o.index] += o.text;
        if (o.finished) finish[o.index] = o.finish_reason;
      }
    }
    for (const auto& [i, f] : finish) EXPECT_EQ(f, FinishReason::kStop) << text[i];
    if (stats != nullptr) *stats = e.stats();
    return text;
  };
  auto check = [](const std::string& t) {
    const auto v = nlohmann::json::parse(t);
    ASSERT_TRUE(v.is_array()) << t;
    ASSERT_EQ(v.size(), 4u) << t;
    for (const auto& x : v) {
      ASSERT_TRUE(x.is_string()) << t;
      EXPECT_LE(x.get<std::string>().size(), 60u * 4) << t;
    }
  };
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 300;
  greedy.constraint = schema;
  EngineStats st;
  const auto plain = run(spec::Method::kNone, greedy, nullptr);
  const auto spec = run(spec::Method::kNgram, greedy, &st);
  EXPECT_GT(st.spec_drafted_tokens_total, 0) << "the drafter proposed nothing: the test shows nothing";
  EXPECT_EQ(spec.at(0), plain.at(0));
  check(plain.at(0));

  SamplingParams sampled = greedy;
  sampled.temperature = 1.0f;
  sampled.seed = 5;
  sampled.n = 3;
  const auto three = run(spec::Method::kNone, sampled, nullptr);
  ASSERT_EQ(three.size(), 3u);
  for (const auto& [i, t] : three) check(t);
  EXPECT_TRUE(three.at(0) != three.at(1) || three.at(1) != three.at(2)) << "three samples, one text";
}

}  // namespace
}  // namespace tessera::engine
