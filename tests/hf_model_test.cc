// Hugging Face folders (model/hf_model.h) and the safetensors reader:
//   - a random model written as GGUF and as its HF twin gives the same
//     logits bit for bit, for every architecture and F32 / F16 / BF16;
//   - `convert` of the twin gives the make-model GGUF's tensor bytes;
//   - sharded safetensors with an index load as one file does;
//   - corrupt or missing files, unknown model types and keys, missing
//     tensors: one Error naming them;
//   - the header parser on truncated, bit-flipped and hand-made hostile
//     headers: an Error or a file whose tensors lie inside the input.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sequence_runner.h"
#include "model/convert.h"
#include "model/gguf.h"
#include "model/hf_model.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "util/test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- the safetensors header parser ----------------------------------------

std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) b[8 + header.size() + i] = static_cast<uint8_t>(i * 7);
  return b;
}

std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    safetensors::File::parse(b.data(), b.size(), "x.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Any input: an Error, or tensors that lie inside it and match their shapes.
void parse_or_error(const std::vector<uint8_t>& b) {
  try {
    const safetensors::File f = safetensors::File::parse(b.data(), b.size(), "x.safetensors");
    for (const safetensors::Tensor& t : f.tensors()) {
      ASSERT_GE(t.data, b.data());
      ASSERT_LE(t.data + t.n_bytes, b.data() + b.size());
      ASSERT_EQ(t.n_bytes, static_cast<size_t>(t.n_elements()) * safetensors::dtype_size(t.dtype));
    }
  } catch (const Error&) {
  }
}

TEST(Safetensors, RoundTrip) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> h = {1, 2, 3};
  const std::string path = testing::temp_path("rt.safetensors");
  safetensors::write(path, {{"a", DType::kF32, {2, 3}, reinterpret_cast<const uint8_t*>(a.data())},
                            {"h", DType::kBF16, {3}, reinterpret_cast<const uint8_t*>(h.data())}},
                     {{"format", "pt"}});
  const safetensors::File f = safetensors::File::open(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  const safetensors::Tensor* t = f.find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, "F32");
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(t->data, a.data(), 24), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 8, 0u);  // the header is padded
  EXPECT_EQ(f.find("h")->dtype, "BF16");
  EXPECT_EQ(f.metadata().at(0), (std::pair<std::string, std::string>{"format", "pt"}));
}

TEST(Safetensors, HostileHeadersNameTheProblem) {
  const auto one = [](const std::string& entry) { return "{\"t\":" + entry + "}"; };
  const std::vector<std::pair<std::vector<uint8_t>, std::string>> cases = {
      {std::vector<uint8_t>(5, 0), "too short"},
      {image("{}", 0), ""},  // empty is valid
      {[] { auto b = image("{}", 0); b[0] = 200; return b; }(), "header length 200"},
      {image("{\"t\":", 0), "not valid JSON"},
      {image("[1]", 0), "not a JSON object"},
      {image(one("[[[[1]]]]"), 0), "nests deeper"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"), 4), "outside the data section"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}"), 8), "tensor 't': data_offsets [0, 8] hold 8"},
      {image(one("{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}"), 8), "unknown dtype 'Q4'"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}"), 8), "not a non-negative integer"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}"), 8),
       "larger than the file"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}"), 8), "outside the data section"},
      {image(one("{\"dtype\":\"F32\",\"shape\":[2]}"), 8), "data_offsets"},
      {image(one("{\"shape\":[2],\"data_offsets\":[0,8]}"), 8), "no \"dtype\""},
      {image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8), "overlap"},
      {image("{\"__metadata__\":{\"k\":1}}", 0), "__metadata__ 'k'"},
  };
  for (const auto& [bytes, want] : cases) {
    const std::string got = parse_error(bytes);
    if (want.empty()) {
      EXPECT_EQ(got, "");
    } else {
      EXPECT_NE(got.find(want), std::string::npos) << "want '" << want << "', got '" << got << "'";
      EXPECT_EQ(got.find('\n'), std::string::npos) << got;
    }
  }
}

TEST(Safetensors, TruncationAndByteFlipsNeverCrash) {
  std::vector<float> a(24, 1.5f);
  const std::string path = testing::temp_path("fuzz.safetensors");
  safetensors::write(path, {{"model.layers.0.w", DType::kF32, {4, 6}, reinterpret_cast<const uint8_t*>(a.data())},
                            {"b", DType::kF16, {2, 2}, reinterpret_cast<const uint8_t*>(a.data())}});
  const std::string s = testing::read_file(path);
  const std::vector<uint8_t> good(s.begin(), s.end());
  for (size_t n = 0; n < good.size(); ++n) parse_or_error(std::vector<uint8_t>(good.begin(), good.begin() + n));
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % std::min<size_t>(b.size(), 8 + 200);  // mostly the header
      b[at] = rng() % 3 == 0 ? static_cast<uint8_t>("0123456789[]{},:\"-"[rng() % 18]) : static_cast<uint8_t>(rng());
    }
    parse_or_error(b);
  }
}

// ---- GGUF and HF twins ----------------------------------------------------

struct Twin {
  std::string gguf, hf;
};

SyntheticModelSpec spec_for(const std::string& arch, DType type) {
  SyntheticModelSpec s = preset_spec("tiny");
  s.arch = arch;
  s.type = type;
  s.n_vocab = 96;
  s.seed = 11;
  if (arch == "mistral" || arch == "gemma2" || arch == "gemma3") s.sliding_window = 5;  // shorter than the prompt
  if (arch == "gemma3") s.n_layer = 7;   // local and global layers
  if (arch == "qwen3") s.n_head_kv = 1;  // another GQA ratio
  if (arch == "phi3") {
    s.rope_scaling = "longrope";
    s.rope_orig_ctx = 8;  // the prompt runs past it: long factors
    s.n_ctx = 64;
  }
  if (arch == "qwen2") s.tied_output = true;
  return s;
}

Twin make_twin(const std::string& arch, DType type, int64_t shard_bytes = 0) {
  const SyntheticModelSpec s = spec_for(arch, type);
  const std::string base = fmt::format("{}-{}-{}", arch, dtype_name(type), shard_bytes);
  Twin t{testing::temp_path(base + ".gguf"), testing::temp_path(base + "-hf")};
  write_synthetic_model(s, t.gguf, 1);
  write_synthetic_hf_folder(s, t.hf, "", shard_bytes, 1);
  return t;
}

std::vector<float> logits_of(const std::string& path) {
  const LoadedModel lm = load_model(path);
  ThreadPool pool(1);
  engine::SequenceRunner runner(*lm.model, {.n_ctx = 32}, pool);
  std::vector<int32_t> ids;
  for (int i = 0; i < 14; ++i) ids.push_back((i * 37 + 5) % 96);
  const std::span<const float> logits = runner.append(ids, /*all_logits=*/true);
  return std::vector<float>(logits.begin(), logits.end());
}

void expect_same_tensors(const gguf::File& a, const gguf::File& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size()) << a.path() << " vs " << b.path();
  for (const gguf::TensorInfo& t : a.tensors()) {
    const gguf::TensorInfo* u = b.find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.type, u->type) << t.name;
    EXPECT_EQ(t.shape_string(), u->shape_string()) << t.name;
    ASSERT_EQ(t.n_bytes, u->n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(t.data, u->data, t.n_bytes), 0) << t.name;
  }
}

class HfTwin : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(HfTwin, SameLogitsBitForBitAndConvertGivesTheGgufTensors) {
  const auto& [arch, type] = GetParam();
  const Twin t = make_twin(arch, type);
  const std::vector<float> want = logits_of(t.gguf);
  const std::vector<float> got = logits_of(t.hf);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << arch;

  // The view of the folder holds the GGUF's tensors, and so does convert's output.
  const gguf::File made = gguf::File::open(t.gguf);
  expect_same_tensors(made, hf::open_folder(t.hf));
  const std::string out = testing::temp_path(fmt::format("conv-{}-{}.gguf", arch, dtype_name(type)));
  write_gguf(*load_model(t.hf).file, out);
  expect_same_tensors(made, gguf::File::open(out));
}

std::string twin_name(const ::testing::TestParamInfo<HfTwin::ParamType>& p) {
  return std::get<0>(p.param) + "_" + std::string(dtype_name(std::get<1>(p.param)));
}

INSTANTIATE_TEST_SUITE_P(Archs, HfTwin,
                         ::testing::Combine(::testing::Values("llama", "llama3", "mistral", "qwen2", "qwen3", "gemma2",
                                                              "gemma3", "phi3"),
                                            ::testing::Values(DType::kF32, DType::kF16, DType::kBF16)),
                         twin_name);

TEST(HfFolder, ConvertToQ8EqualsMakeModelQ8) {
  for (const char* arch : {"llama", "qwen3"}) {
    const Twin t = make_twin(arch, DType::kF32);
    SyntheticModelSpec s = spec_for(arch, DType::kQ8_0);
    const std::string q8 = testing::temp_path(std::string(arch) + "-made-q8.gguf");
    write_synthetic_model(s, q8, 1);
    const std::string out = testing::temp_path(std::string(arch) + "-conv-q8.gguf");
    write_gguf(*load_model(t.hf).file, out, DType::kQ8_0);
    expect_same_tensors(gguf::File::open(q8), gguf::File::open(out));
  }
}

TEST(HfFolder, ShardsLoadAsOneFile) {
  const Twin one = make_twin("llama", DType::kF16);
  const Twin sharded = make_twin("llama", DType::kF16, /*shard_bytes=*/20000);
  ASSERT_TRUE(fs::exists(sharded.hf + "/model.safetensors.index.json"));
  int n_shards = 0;
  for (const auto& e : fs::directory_iterator(sharded.hf)) {
    n_shards += e.path().filename().string().rfind("model-0000", 0) == 0;
  }
  ASSERT_GE(n_shards, 3);
  expect_same_tensors(hf::open_folder(one.hf), hf::open_folder(sharded.hf));
  const std::vector<float> a = logits_of(one.hf), b = logits_of(sharded.hf);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// ---- errors ---------------------------------------------------------------

std::string load_error(const std::string& path) {
  try {
    load_model(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string copy_folder(const std::string& from, const std::string& name) {
  const std::string to = testing::temp_path(name);
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

void edit_config(const std::string& dir, const std::function<void(json&)>& edit) {
  json j = json::parse(testing::read_file(dir + "/config.json"));
  edit(j);
  testing::write_file(dir + "/config.json", j.dump());
}

void expect_error(const std::string& path, const std::vector<std::string>& parts) {
  const std::string e = load_error(path);
  ASSERT_FALSE(e.empty()) << path << " loaded";
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "want '" << p << "' in: " << e;
}

TEST(HfFolder, ErrorsNameTheFileKeyOrTensor) {
  const Twin t = make_twin("qwen3", DType::kF32);

  const std::string empty = testing::temp_path("empty-dir");
  fs::create_directories(empty);
  expect_error(empty, {"without config.json"});

  std::string d = copy_folder(t.hf, "e-arch");
  edit_config(d, [](json& j) { j["model_type"] = "mamba"; });
  expect_error(d, {"config.json", "model_type 'mamba' is not supported"});

  d = copy_folder(t.hf, "e-key");
  edit_config(d, [](json& j) { j["quantization_config"] = {{"bits", 4}}; });
  expect_error(d, {"config.json", "key 'quantization_config'"});

  d = copy_folder(t.hf, "e-act");
  edit_config(d, [](json& j) { j["hidden_act"] = "gelu"; });
  expect_error(d, {"'hidden_act' = \"gelu\""});

  d = copy_folder(t.hf, "e-rope");
  edit_config(d, [](json& j) { j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}}; });
  expect_error(d, {"rope_scaling type 'dynamic'"});

  d = copy_folder(t.hf, "e-window");
  edit_config(d, [](json& j) { j["use_sliding_window"] = true; });
  expect_error(d, {"'use_sliding_window' = true"});

  d = copy_folder(t.hf, "e-noweights");
  fs::remove(d + "/model.safetensors");
  expect_error(d, {"no model.safetensors"});

  d = copy_folder(t.hf, "e-truncated");
  fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") - 100);
  expect_error(d, {"model.safetensors", "tensor '"});

  // One tensor left out, another renamed.
  const auto rewrite = [&](const std::string& dir, const std::function<bool(safetensors::TensorToWrite&)>& keep) {
    const std::string s = testing::read_file(dir + "/model.safetensors");
    const std::vector<uint8_t> bytes(s.begin(), s.end());
    const safetensors::File f = safetensors::File::parse(bytes.data(), bytes.size());
    std::vector<safetensors::TensorToWrite> out;
    for (const safetensors::Tensor& x : f.tensors()) {
      safetensors::TensorToWrite w{x.name, safetensors::to_dtype(x.dtype, x.name), x.shape, x.data};
      if (keep(w)) out.push_back(w);
    }
    safetensors::write(dir + "/model.safetensors", out);
  };
  d = copy_folder(t.hf, "e-missing");
  rewrite(d, [](safetensors::TensorToWrite& w) { return w.name != "model.layers.1.mlp.up_proj.weight"; });
  expect_error(d, {"missing tensor 'model.layers.1.mlp.up_proj.weight'"});

  d = copy_folder(t.hf, "e-unknown");
  rewrite(d, [](safetensors::TensorToWrite& w) {
    if (w.name == "model.layers.0.mlp.up_proj.weight") w.name = "model.layers.0.mlp.experts.weight";
    return true;
  });
  expect_error(d, {"tensor 'model.layers.0.mlp.experts.weight' is not used"});

  d = copy_folder(t.hf, "e-lmhead");
  edit_config(d, [](json& j) { j["tie_word_embeddings"] = true; });
  EXPECT_EQ(load_error(d), "");  // a stored copy of the tied matrix is ignored
  d = copy_folder(make_twin("qwen2", DType::kF32).hf, "e-untied");  // qwen2's twin is tied
  edit_config(d, [](json& j) { j["tie_word_embeddings"] = false; });
  expect_error(d, {"missing tensor 'lm_head.weight'"});

  d = copy_folder(make_twin("llama", DType::kF32, 20000).hf, "e-index");
  testing::write_file(d + "/model.safetensors.index.json",
                      R"({"weight_map": {"model.norm.weight": "../model-00001-of-00009.safetensors"}})");
  expect_error(d, {"is not a file in the folder"});
}

}  // namespace
}  // namespace tessera
