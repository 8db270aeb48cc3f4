#include "train/finetune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "adapters/soft_prompt_file.h"
#include "core/error.h"

namespace tessera::train {

namespace {

// Zeroed gradients of a's shapes.
LoraAdapter zero_like(const LoraAdapter& a) {
  LoraAdapter g;
  g.layers.resize(a.layers.size());
  for (size_t il = 0; il < a.layers.size(); ++il) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraPair& p = a.layers[il][static_cast<size_t>(t)];
      LoraPair& q = g.layers[il][static_cast<size_t>(t)];
      if (p.rank == 0) continue;
      q.rank = p.rank;
      q.in = p.in;
      q.out = p.out;
      q.a.assign(p.a.size(), 0.0f);
      q.b.assign(p.b.size(), 0.0f);
    }
  }
  return g;
}

// Every (parameter, gradient) vector pair of an adapter, in a fixed order.
template <class Fn>
void for_each_tensor(LoraAdapter& a, LoraAdapter& g, Fn fn) {
  for (size_t il = 0; il < a.layers.size(); ++il) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      LoraPair& p = a.layers[il][static_cast<size_t>(t)];
      if (p.rank == 0) continue;
      LoraPair& q = g.layers[il][static_cast<size_t>(t)];
      fn(p.a, q.a);
      fn(p.b, q.b);
    }
  }
}

}  // namespace

LoraAdapter init_lora(const ModelConfig& base, int64_t rank, float alpha, uint32_t targets, uint64_t seed) {
  TESSERA_CHECK(rank >= 1 && targets != 0, kInvalidArgument, "LoRA: rank {} and no target", rank);
  LoraAdapter a;
  a.alpha = alpha;
  a.layers.resize(static_cast<size_t>(base.n_layer));
  std::mt19937_64 rng(seed);
  for (auto& layer : a.layers) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if ((targets >> t & 1u) == 0) continue;
      LoraPair& p = layer[static_cast<size_t>(t)];
      const auto [in, out] = lora_target_shape(base, static_cast<LoraTarget>(t));
      p.rank = rank;
      p.in = in;
      p.out = out;
      p.scale = alpha / static_cast<float>(rank);
      const float bound = 1.0f / std::sqrt(static_cast<float>(in));
      std::uniform_real_distribution<float> u(-bound, bound);
      p.a.resize(static_cast<size_t>(rank * in));
      for (float& v : p.a) v = u(rng);
      p.b.assign(static_cast<size_t>(rank * out), 0.0f);
    }
  }
  return a;
}

std::vector<std::vector<int32_t>> text_windows(const std::vector<int32_t>& tokens, int64_t ctx) {
  TESSERA_CHECK(ctx >= 1, kInvalidArgument, "--ctx must be at least 1");
  std::vector<std::vector<int32_t>> out;
  const size_t w = static_cast<size_t>(ctx + 1);
  for (size_t i = 0; i + w <= tokens.size(); i += w) out.emplace_back(tokens.begin() + i, tokens.begin() + i + w);
  TESSERA_CHECK(!out.empty(), kInvalidArgument, "the text has {} tokens: fewer than one window of {} (--ctx + 1)",
                tokens.size(), w);
  return out;
}

void train(const std::vector<std::vector<int32_t>>& windows, const Trainable& t, const TrainOptions& o,
           ThreadPool& pool, const StepCallback& on_step) {
  TESSERA_CHECK(o.batch >= 1 && o.epochs >= 1, kInvalidArgument, "--batch and --epochs must be at least 1");
  const int64_t per_epoch = std::max<int64_t>(1, static_cast<int64_t>(windows.size()) / o.batch);
  const int64_t steps = o.steps > 0 ? o.steps : per_epoch * o.epochs;
  auto zeros = [&t] {
    std::vector<std::vector<float>> z;
    for (const std::vector<float>* p : t.params) z.emplace_back(p->size(), 0.0f);
    return z;
  };
  std::vector<std::vector<float>> m1 = zeros(), m2 = zeros();
  std::mt19937_64 rng(o.seed ^ 0x5eedULL);
  std::vector<size_t> order(windows.size());
  size_t next = order.size();  // reshuffle on first use
  const auto start = std::chrono::steady_clock::now();
  TrainReport r;
  r.steps = steps;
  for (int64_t step = 1; step <= steps; ++step) {
    std::vector<size_t> picked;
    for (int64_t i = 0; i < o.batch; ++i) {
      if (next == order.size()) {  // a new epoch: a new order
        for (size_t j = 0; j < order.size(); ++j) order[j] = j;
        std::shuffle(order.begin(), order.end(), rng);
        next = 0;
      }
      picked.push_back(order[next++]);
    }
    std::vector<std::vector<std::vector<float>>> grads(picked.size());
    std::vector<double> losses(picked.size());
    pool.parallel_for(static_cast<int64_t>(picked.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const size_t at = static_cast<size_t>(i);
        grads[at] = zeros();
        losses[at] = t.window_grad(windows[picked[at]], grads[at]);
      }
    });
    // In window order: the same sums for any thread count.
    std::vector<std::vector<float>> g = zeros();
    double loss = 0.0;
    for (size_t i = 0; i < grads.size(); ++i) {
      loss += losses[i];
      for (size_t p = 0; p < g.size(); ++p) {
        for (size_t k = 0; k < g[p].size(); ++k) g[p][k] += grads[i][p][k];
      }
    }
    const float inv = 1.0f / static_cast<float>(grads.size());
    for (size_t p = 0; p < g.size(); ++p) {
      for (float& x : g[p]) x *= inv;
      adamw_step(t.params[p]->data(), g[p].data(), m1[p].data(), m2[p].data(), static_cast<int64_t>(g[p].size()),
                 o.adamw, step);
    }
    r.step = step;
    r.loss = loss / static_cast<double>(grads.size());
    r.tokens += static_cast<int64_t>(picked.size()) * o.ctx;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_step) on_step(r);
  }
}

void train_lora(const LoraTrainModel& m, const std::vector<std::vector<int32_t>>& windows, LoraAdapter& a,
                const TrainOptions& o, ThreadPool& pool, const StepCallback& on_step) {
  Trainable t;
  LoraAdapter shapes = zero_like(a);
  for_each_tensor(a, shapes, [&t](std::vector<float>& p, std::vector<float>&) { t.params.push_back(&p); });
  t.window_grad = [&m, &a](const std::vector<int32_t>& w, std::vector<std::vector<float>>& grads) {
    LoraAdapter g = zero_like(a);
    const double loss = m.loss_and_grads(w, a, &g);
    size_t i = 0;  // the pairs in the order of t.params
    for_each_tensor(g, g, [&](std::vector<float>&, std::vector<float>& gv) { grads[i++] = std::move(gv); });
    return loss;
  };
  train(windows, t, o, pool, on_step);
}

std::vector<float> init_prompt(const LoraTrainModel& m, int64_t n_virtual, uint64_t seed) {
  const int64_t E = m.config().n_embd, V = m.config().n_vocab;
  TESSERA_CHECK(n_virtual >= 1, kInvalidArgument, "--virtual-tokens must be at least 1");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, V - 1);
  std::vector<float> out(static_cast<size_t>(n_virtual * E));
  for (int64_t r = 0; r < n_virtual; ++r) {
    std::copy_n(m.token_embeddings().begin() + pick(rng) * E, E, out.begin() + r * E);
  }
  return out;
}

void train_prompt(const LoraTrainModel& m, const std::vector<std::vector<int32_t>>& windows, std::vector<float>& prompt,
                  const TrainOptions& o, ThreadPool& pool, const StepCallback& on_step) {
  Trainable t;
  t.params = {&prompt};
  t.window_grad = [&m, &prompt](const std::vector<int32_t>& w, std::vector<std::vector<float>>& grads) {
    return m.prompt_loss_and_grads(w, prompt, &grads[0]);
  };
  train(windows, t, o, pool, on_step);
}

double mean_loss(const LoraTrainModel& m, const std::vector<std::vector<int32_t>>& windows, const LoraAdapter* a,
                 ThreadPool& pool, const std::vector<float>* prompt) {
  std::vector<double> losses(windows.size());
  const int64_t V = m.config().n_vocab;
  const size_t nv = prompt != nullptr ? prompt->size() / static_cast<size_t>(m.config().n_embd) : 0;
  pool.parallel_for(static_cast<int64_t>(windows.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const std::vector<int32_t>& w = windows[static_cast<size_t>(i)];
      const std::vector<float> logits = m.logits(w, a, prompt);
      std::vector<int32_t> targets(nv + w.size(), -1);  // the virtual rows predict nothing
      for (size_t t = 0; t + 1 < w.size(); ++t) targets[nv + t] = w[t + 1];
      losses[static_cast<size_t>(i)] = cross_entropy(logits.data(), static_cast<int64_t>(targets.size()), V,
                                                     targets.data(), static_cast<float*>(nullptr));
    }
  });
  double sum = 0.0;
  for (double l : losses) sum += l;
  return sum / static_cast<double>(losses.size());
}

void write_soft_prompt_npy(const std::vector<float>& prompt, int64_t n_embd, const std::string& path) {
  TESSERA_CHECK(n_embd >= 1 && !prompt.empty() && prompt.size() % static_cast<size_t>(n_embd) == 0, kInvalidArgument,
                "a soft prompt of {} values is not rows of {}", prompt.size(), n_embd);
  const std::string shape = fmt::format("({}, {})", prompt.size() / static_cast<size_t>(n_embd), n_embd);
  const std::string out = adapters::npy_bytes("<f4", shape, prompt.data(), prompt.size() * sizeof(float));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  TESSERA_CHECK(f != nullptr, kIo, "cannot write '{}'", path);
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  TESSERA_CHECK(std::fclose(f) == 0 && ok, kIo, "cannot write '{}'", path);
}

}  // namespace tessera::train
