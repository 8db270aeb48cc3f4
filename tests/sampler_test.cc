// The sampler against a reference written the plain way (sort everything,
// softmax, cut top-k, top-p, min-p, renormalise): every sampled token lies
// in the reference's kept set, and the empirical frequencies of many draws
// match the reference probabilities; penalties; greedy; reproducibility.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"

namespace tessera::engine {
namespace {

// token -> probability of the kept set.
std::map<int32_t, double> reference(const std::vector<float>& logits, const SamplingParams& p) {
  const int32_t V = static_cast<int32_t>(logits.size());
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int32_t n = p.top_k > 0 ? std::min(p.top_k, V) : V;
  std::vector<double> pr(n);
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) sum += pr[i] = std::exp((static_cast<double>(logits[idx[i]]) - logits[idx[0]]) / p.temperature);
  for (double& x : pr) x /= sum;
  int32_t keep = n;
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
      cum += pr[i];
      if (cum >= p.top_p - 1e-9) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    int32_t k = 1;
    while (k < keep && pr[k] >= p.min_p * pr[0]) ++k;
    keep = k;
  }
  std::map<int32_t, double> out;
  double total = 0.0;
  for (int32_t i = 0; i < keep; ++i) total += pr[i];
  for (int32_t i = 0; i < keep; ++i) out[idx[i]] = pr[i] / total;
  return out;
}

std::vector<float> random_logits(int32_t V, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 2.0f);
  std::vector<float> l(V);
  for (float& x : l) x = g(rng);
  return l;
}

TEST(Sampler, DrawsMatchReferenceDistribution) {
  std::mt19937 gen(99);
  struct Case {
    float temperature, top_p, min_p;
    int32_t top_k;
  };
  const Case cases[] = {{1.0f, 1.0f, 0.0f, 0}, {0.7f, 0.9f, 0.0f, 0}, {1.3f, 1.0f, 0.05f, 0},
                        {1.0f, 0.5f, 0.0f, 40}, {0.8f, 0.95f, 0.02f, 100}, {1.0f, 1.0f, 0.0f, 5},
                        {2.0f, 0.99f, 0.0f, 0}};
  for (const Case& c : cases) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.top_k = c.top_k;
    SCOPED_TRACE(::testing::Message() << "T " << c.temperature << " top_p " << c.top_p << " min_p " << c.min_p
                                      << " top_k " << c.top_k);
    const std::vector<float> logits = random_logits(600, gen);
    const std::map<int32_t, double> ref = reference(logits, p);
    Sampler s;
    Rng rng(12345);
    constexpr int kDraws = 20000;
    std::map<int32_t, int> count;
    for (int i = 0; i < kDraws; ++i) {
      std::vector<float> l = logits;
      const int32_t t = s.sample(l, p, {}, rng).token;
      ASSERT_TRUE(ref.count(t)) << "token " << t << " is outside the kept set";
      ++count[t];
    }
    for (const auto& [t, pr] : ref) {
      const double f = static_cast<double>(count[t]) / kDraws;
      EXPECT_NEAR(f, pr, 5.0 * std::sqrt(pr * (1.0 - pr) / kDraws) + 1e-3) << "token " << t;
    }
  }
}

TEST(Sampler, GreedyPenaltiesAndReproducibility) {
  std::mt19937 gen(5);
  std::vector<float> logits = random_logits(500, gen);
  logits[17] = 50.0f;
  logits[300] = 49.0f;
  Sampler s;
  Rng rng(1);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<float> l = logits;
  EXPECT_EQ(s.sample(l, greedy, {}, rng).token, 17);
  // Repetition penalty 2 on a seen token 17: 50 / 2 = 25 < 49.
  TokenHistory h;
  h.add_output(17);
  SamplingParams rep = greedy;
  rep.repetition_penalty = 2.0f;
  l = logits;
  EXPECT_EQ(s.sample(l, rep, h, rng).token, 300);
  SamplingParams pres = greedy;
  pres.presence_penalty = 1.5f;
  l = logits;
  EXPECT_EQ(s.sample(l, pres, h, rng).token, 300);
  // The same seed gives the same draws.
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_p = 0.9f;
  Rng a(77), b(77);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> la = logits, lb = logits;
    ASSERT_EQ(s.sample(la, p, {}, a).token, s.sample(lb, p, {}, b).token);
  }
}

// NaN or +inf logits (a corrupt weight block's NaN scale, an overflow) are
// refused with an error for every kind of sampling (min-p over NaN weights
// would otherwise keep no candidate); -inf (a masked id) is not.
TEST(Sampler, NonFiniteLogitsAreAnErrorNotADraw) {
  std::mt19937 gen(6);
  Sampler s;
  Rng rng(3);
  SamplingParams greedy, minp, topp;
  greedy.temperature = 0.0f;
  minp.min_p = 0.1f;
  topp.top_p = 0.5f;
  for (const float bad : {NAN, INFINITY}) {
    for (const SamplingParams& p : {greedy, minp, topp}) {
      std::vector<float> l = random_logits(300, gen);
      l[123] = bad;
      EXPECT_THROW(s.sample(l, p, {}, rng), Error);
    }
  }
  std::vector<float> l = random_logits(300, gen);
  l[5] = -INFINITY;
  l[9] = 40.0f;
  EXPECT_EQ(s.sample(l, greedy, {}, rng).token, 9);
}

}  // namespace
}  // namespace tessera::engine
