// Models split over several files by llama.cpp's gguf-split
// (PREFIX-00001-of-0000N.gguf: the first part holds the metadata, every part
// split.no / split.count, the first split.tensors.count): opened from the
// first part they give the whole model's logits bit for bit; a missing,
// mismatched or wrongly named part is named in a one-line error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sequence_runner.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "util/test_util.h"

namespace tessera {
namespace {

gguf::Value uint_value(gguf::ValueType type, uint64_t v) {
  gguf::Value x;
  x.type = type;
  x.u = v;
  x.i = static_cast<int64_t>(v);
  return x;
}

std::string whole_model() {
  static const std::string path = [] {
    SyntheticModelSpec s = preset_spec("tiny");
    s.arch = "qwen3moe";
    s.n_vocab = 128;
    s.n_ff_exp = 32;
    const std::string p = testing::temp_path("whole.gguf");
    write_synthetic_model(s, p, 1);
    return p;
  }();
  return path;
}

// Writes `src` as n parts PREFIX-0000i-of-0000n.gguf as gguf-split does;
// `edit(i, writer)` may change part i's keys after they are set.
std::string split(const std::string& prefix, int n,
                  const std::function<void(int, gguf::Writer&)>& edit = [](int, gguf::Writer&) {}) {
  const gguf::File src = gguf::File::open(whole_model());
  const size_t total = src.tensors().size();
  for (int i = 0; i < n; ++i) {
    gguf::Writer w;
    if (i == 0) {
      for (const auto& [k, v] : src.metadata()) w.set_value(k, v);
    }
    w.set_value("split.no", uint_value(gguf::ValueType::kU16, static_cast<uint64_t>(i)));
    w.set_value("split.count", uint_value(gguf::ValueType::kU16, static_cast<uint64_t>(n)));
    w.set_value("split.tensors.count", uint_value(gguf::ValueType::kI32, total));
    edit(i, w);
    for (size_t t = total * static_cast<size_t>(i) / n; t < total * static_cast<size_t>(i + 1) / n; ++t) {
      const gguf::TensorInfo& info = src.tensors()[t];
      w.add_tensor(info.name, info.type, std::vector<int64_t>(info.ne, info.ne + info.n_dims),
                   [&info](uint8_t* out, size_t bytes) { std::memcpy(out, info.data, bytes); });
    }
    w.write(fmt::format("{}-{:05}-of-{:05}.gguf", prefix, i + 1, n));
  }
  return fmt::format("{}-00001-of-{:05}.gguf", prefix, n);
}

std::vector<float> logits_of(const std::string& path) {
  const LoadedModel lm = load_model(path);
  ThreadPool pool(1);
  engine::SequenceRunner r(*lm.model, {.n_ctx = 32}, pool);
  const std::vector<int32_t> ids = {1, 5, 77, 30, 9, 120};
  const std::span<const float> l = r.append(ids, /*all_logits=*/true);
  return std::vector<float>(l.begin(), l.end());
}

TEST(GgufSplit, PartsGiveTheWholeModel) {
  const std::string first = split(testing::temp_path("model"), 3);
  const gguf::File f = gguf::File::open(first);
  EXPECT_EQ(f.tensors().size(), gguf::File::open(whole_model()).tensors().size());
  EXPECT_EQ(logits_of(first), logits_of(whole_model()));
}

void expect_error(const std::string& path, std::string_view needle) {
  try {
    gguf::File::open(path);
    ADD_FAILURE() << path << " opened; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string_view(e.what()).find(needle), std::string_view::npos) << e.what();
    EXPECT_EQ(std::string_view(e.what()).find('\n'), std::string_view::npos) << e.what();
  }
}

TEST(GgufSplit, PartsOpenedOnDemandHoldTheSameBytes) {
  const std::string first = split(testing::temp_path("lazy"), 3);
  const gguf::File whole = gguf::File::open(whole_model());
  const gguf::File lazy = gguf::File::open(first, gguf::Mapping::kOnDemand);
  ASSERT_TRUE(lazy.on_demand());
  ASSERT_EQ(lazy.tensors().size(), whole.tensors().size());
  for (const gguf::TensorInfo& w : whole.tensors()) {
    const gguf::TensorInfo& l = lazy.tensor(w.name);
    ASSERT_EQ(l.n_bytes, w.n_bytes);
    EXPECT_EQ(std::memcmp(lazy.bytes(l), w.data, w.n_bytes), 0) << w.name << " (part " << l.part + 1 << ")";
  }
}

TEST(GgufSplit, BadPartsAreNamed) {
  const std::string dir = testing::temp_path("splits");
  std::filesystem::create_directories(dir);
  // A missing part.
  const std::string first = split(dir + "/gone", 3);
  std::filesystem::remove(dir + "/gone-00002-of-00003.gguf");
  expect_error(first, "part 2 of 3 is missing (" + dir + "/gone-00002-of-00003.gguf)");
  // A part of another split.
  const std::string mixed = split(dir + "/mixed", 3, [](int i, gguf::Writer& w) {
    if (i == 2) w.set_value("split.no", uint_value(gguf::ValueType::kU16, 1));
  });
  expect_error(mixed, "mixed-00003-of-00003.gguf: part 3 of 3 says it is part 2 of 3");
  // Opened from a later part.
  split(dir + "/later", 2);
  expect_error(dir + "/later-00002-of-00002.gguf", "is part 2 of a model split in 2 files: open the first part (" +
                                                       dir + "/later-00001-of-00002.gguf)");
  // A tensor count that the parts do not hold.
  const std::string short_count = split(dir + "/count", 2, [](int i, gguf::Writer& w) {
    if (i == 0) w.set_value("split.tensors.count", uint_value(gguf::ValueType::kI32, 5));
  });
  expect_error(short_count, "'split.tensors.count' = 5, but the 2 parts hold");
  // A first part whose name does not say where the others are.
  const std::string renamed = dir + "/renamed.gguf";
  std::filesystem::copy_file(split(dir + "/named", 2), renamed);
  expect_error(renamed, "the name does not end in -00001-of-00002.gguf");
}

}  // namespace
}  // namespace tessera
