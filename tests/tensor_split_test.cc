// Tensor parallelism's arithmetic (model/tensor_split.h) in one process: the
// shards of a model, each on its own thread with an in-process reducer (the
// part MPI's all-reduce plays across processes), give the whole model's
// logits within the reduction's reordering and its greedy tokens; in F32 and
// in Q8_0 (column views of whole blocks), and with the fused tensors of
// Phi-3. A split that does not divide is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sequence_runner.h"
#include "model/synthetic.h"
#include "quant/quantize_model.h"
#include "tokenizer/tokenizer.h"
#include "util/test_util.h"

namespace tessera {
namespace {

// The ranks' threads meet here; the last to arrive adds the parts in rank
// order and hands every rank the same sum.
class ThreadReducers {
 public:
  explicit ThreadReducers(int n) : parts_(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) handles_.push_back(std::make_unique<Handle>(*this, r));
  }
  dist::Reducer* rank(int r) { return handles_[static_cast<size_t>(r)].get(); }

 private:
  struct Handle final : dist::Reducer {
    Handle(ThreadReducers& g, int r) : group(g), rank(r) {}
    void sum(std::span<float> values) override { group.sum(rank, values); }
    ThreadReducers& group;
    int rank;
  };
  void sum(int rank, std::span<float> values) {
    std::unique_lock lock(mu_);
    parts_[static_cast<size_t>(rank)] = values;
    const uint64_t generation = generation_;
    if (++arrived_ < static_cast<int>(parts_.size())) {
      cv_.wait(lock, [&] { return generation_ != generation; });
      return;
    }
    std::vector<float> total(values.size(), 0.0f);
    for (const std::span<float> p : parts_) {
      EXPECT_EQ(p.size(), total.size());
      for (size_t i = 0; i < total.size(); ++i) total[i] += p[i];
    }
    for (const std::span<float> p : parts_) std::copy(total.begin(), total.end(), p.begin());
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::span<float>> parts_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::unique_ptr<Handle>> handles_;
};

struct Run {
  std::vector<float> prompt_logits;  // [n_prompt, n_vocab]
  std::vector<int32_t> greedy;
};

// The prompt's logits, then n greedy tokens, through one model (a shard or the whole).
Run run(const Model& m, const std::vector<int32_t>& prompt, int n) {
  ThreadPool pool(1);
  engine::SequenceRunner seq(m, {.n_ctx = 256}, pool);
  Run out;
  const std::span<const float> all = seq.append(prompt, /*all_logits=*/true);
  out.prompt_logits.assign(all.begin(), all.end());
  const int64_t V = m.config().n_vocab;
  std::span<const float> last = all.subspan(all.size() - static_cast<size_t>(V));
  for (int i = 0; i < n; ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    out.greedy.push_back(t);
    const int32_t one[] = {t};
    last = seq.append(one);
  }
  return out;
}

// Loads `path` as `n` shards, runs them side by side, and checks rank 0's
// results (every rank's logits are the same bits) against the whole model's.
void expect_split_matches_whole(const std::string& path, int n, const std::vector<int32_t>& prompt) {
  const LoadedModel whole = load_model(path);
  const Run want = run(*whole.model, prompt, 24);
  ThreadReducers reducers(n);
  std::vector<LoadedModel> shards;
  for (int r = 0; r < n; ++r) shards.push_back(load_model(path, {.rank = r, .size = n, .reducer = reducers.rank(r)}));
  EXPECT_EQ(shards[0].model->config().n_head, whole.model->config().n_head / n);
  EXPECT_EQ(shards[0].model->config().n_ff, whole.model->config().n_ff / n);
  std::vector<Run> got(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { got[static_cast<size_t>(r)] = run(*shards[static_cast<size_t>(r)].model, prompt, 24); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)].prompt_logits, got[0].prompt_logits) << "rank " << r << " differs from rank 0";
  }
  // The split changes only the order of each residual update's sums: the
  // logits agree to float rounding of the model's own scale.
  float scale = 0.0f, worst = 0.0f;
  ASSERT_EQ(got[0].prompt_logits.size(), want.prompt_logits.size());
  for (size_t i = 0; i < want.prompt_logits.size(); ++i) {
    scale = std::max(scale, std::abs(want.prompt_logits[i]));
    worst = std::max(worst, std::abs(got[0].prompt_logits[i] - want.prompt_logits[i]));
  }
  EXPECT_LT(worst, 2e-5f * scale) << path << " split " << n << ": max |diff| " << worst << " of logits up to " << scale;
  EXPECT_EQ(got[0].greedy, want.greedy) << path << " split " << n;
}

std::vector<int32_t> story_prompt() {
  const auto& s = testing::stories260k();
  return s.tok->encode("Once upon a time, there was a little girl named Lily. She liked to", true);
}

TEST(TensorSplit, Stories260KInTwoShards) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  expect_split_matches_whole(testing::stories260k_path(), 2, story_prompt());
}

TEST(TensorSplit, Stories1MInTwoAndFourShardsF32AndQ8_0) {
  TESSERA_REQUIRE_SHARED("models/stories1M/stories1M.gguf");
  const std::string f32 = testing::shared_path("models/stories1M/stories1M.gguf");
  expect_split_matches_whole(f32, 2, story_prompt());
  expect_split_matches_whole(f32, 4, story_prompt());
  // Q8_0: the output projection's and down's columns are views of whole blocks.
  const std::string q8 = testing::temp_path("stories1M-q8_0.gguf");
  ThreadPool pool(2);
  quant::QuantizeOptions o;
  o.type = DType::kQ8_0;
  quant::quantize_model(*load_model(f32).file, q8, o, nullptr, pool);
  expect_split_matches_whole(q8, 2, story_prompt());
}

TEST(TensorSplit, FamiliesWithBiasesAndFusedTensors) {
  // qwen2 (Q, K, V biases), qwen3 (per-head norms), phi3 (fused QKV and gate/up).
  for (const char* arch : {"qwen2", "qwen3", "phi3"}) {
    const std::string path = testing::temp_path(std::string("split-") + arch + ".gguf");
    SyntheticModelSpec spec;
    spec.arch = arch;
    spec.n_vocab = 320;
    spec.n_ctx = 512;
    write_synthetic_model(spec, path, 1);
    const std::vector<int32_t> prompt = {1, 17, 250, 3, 99, 42, 7, 300, 12};
    expect_split_matches_whole(path, 2, prompt);
  }
}

TEST(TensorSplit, RefusesWhatItCannotSplit) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  ThreadReducers reducers(3);
  try {
    load_model(testing::stories260k_path(), {.rank = 0, .size = 3, .reducer = reducers.rank(0)});
    FAIL() << "4 KV heads split over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be split evenly over 3 ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
