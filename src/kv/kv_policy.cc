#include "kv/kv_policy.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::kv {

const char* kv_policy_name(KvPolicyKind kind) {
  switch (kind) {
    case KvPolicyKind::kDense: return "dense";
    case KvPolicyKind::kWindow: return "window";
    case KvPolicyKind::kRecompute: return "recompute";
    case KvPolicyKind::kSink: return "sink";
    case KvPolicyKind::kH2O: return "h2o";
    case KvPolicyKind::kSpAtten: return "spatten";
  }
  return "?";
}

std::optional<KvPolicyKind> parse_kv_policy(std::string_view name) {
  for (KvPolicyKind k : {KvPolicyKind::kDense, KvPolicyKind::kWindow, KvPolicyKind::kRecompute, KvPolicyKind::kSink,
                         KvPolicyKind::kH2O, KvPolicyKind::kSpAtten}) {
    if (name == kv_policy_name(k)) return k;
  }
  return std::nullopt;
}

std::string check_kv_policy(const KvPolicy& p) {
  if (!p.bounded()) return "";
  if (p.sinks < 0) return fmt::format("--kv-sinks {} is negative", p.sinks);
  if (p.granularity < 0) return fmt::format("eviction granularity {} is negative", p.granularity);
  const int64_t sinks = p.kind == KvPolicyKind::kSink ? p.sinks : 0;
  if (p.budget < sinks + 1) {
    return fmt::format("--kv-policy {} needs a --kv-budget above its {} sink tokens, got {}", kv_policy_name(p.kind),
                       sinks, p.budget);
  }
  if (p.scored() && (recent_tokens(p) < 0 || recent_tokens(p) >= p.budget)) {
    return fmt::format("--kv-policy {} keeps {} recent tokens: needs 0 <= recent < budget {}", kv_policy_name(p.kind),
                       recent_tokens(p), p.budget);
  }
  return "";
}

uint8_t score_depth(int64_t n_layer) {
  TESSERA_CHECK(n_layer >= 1 && n_layer <= 255, kInvalidArgument,
                "h2o / spatten KV policies track up to 255 layers, the model has {}", n_layer);
  return static_cast<uint8_t>(n_layer);
}

int64_t recent_tokens(const KvPolicy& p) {
  if (p.recent >= 0) return p.recent;
  return p.kind == KvPolicyKind::kSpAtten ? p.budget / 4 : p.budget / 2;
}

int64_t layer_cap(const KvPolicy& p, int64_t il, int64_t n_layer) {
  if (n_layer <= 1) return p.budget;
  return p.budget - (p.budget / 2) * il / (n_layer - 1);
}

namespace {

// Live slots in token order (a dense table: slot j holds token j).
std::vector<int64_t> live_slots(const BlockTable& t) {
  std::vector<int64_t> live;
  if (t.mapped()) {
    for (int64_t j = 0; j < static_cast<int64_t>(t.key_pos.size()); ++j) {
      if (t.key_pos[j] >= 0) live.push_back(j);
    }
    std::sort(live.begin(), live.end(), [&](int64_t a, int64_t b) { return t.key_tok[a] < t.key_tok[b]; });
  } else {
    for (int64_t j = 0; j < t.num_tokens; ++j) live.push_back(j);
  }
  return live;
}

// Scored policies: the live slots that may leave (or be hidden), i.e. all
// but the recent tokens that stay beside n_new new ones, in token order.
std::vector<int64_t> scored_candidates(const KvPolicy& p, const BlockTable& t, int64_t n_new) {
  std::vector<int64_t> live = live_slots(t);
  const int64_t keep = std::clamp<int64_t>(recent_tokens(p) - n_new, 0, static_cast<int64_t>(live.size()));
  live.resize(live.size() - static_cast<size_t>(keep));
  return live;
}

// Whether slot a's key is less important than slot b's: less attention
// mass per query since it entered (the mass divided by the tokens computed
// since, itself included). H2O ranks by the summed mass, which in an
// endless stream favours old tokens for ever: on stories260K at budget 64
// the sum gave perplexity 4.69 and the mean 4.25 (docs/KV_POLICIES.md).
bool lighter(const BlockTable& t, int64_t a, int64_t b) {
  const __int128 age_a = t.num_tokens - t.key_tok[a], age_b = t.num_tokens - t.key_tok[b];
  return static_cast<__int128>(t.key_score[a]) * age_b < static_cast<__int128>(t.key_score[b]) * age_a;
}

}  // namespace

void plan_cascade(const KvPolicy& p, BlockTable& t, int64_t n_new) {
  if (p.kind != KvPolicyKind::kSpAtten || t.num_tokens + n_new <= p.budget) return;
  TESSERA_ASSERT(t.scored() && t.mapped());
  const int64_t n_layer = t.score_depth;
  std::vector<int64_t> cand = scored_candidates(p, t, n_new);
  // Least important first (stable: the oldest first on ties).
  std::stable_sort(cand.begin(), cand.end(), [&](int64_t a, int64_t b) { return lighter(t, a, b); });
  for (int64_t il = 1; il < n_layer; ++il) {
    int64_t seen = n_new;
    for (size_t j = 0; j < t.key_pos.size(); ++j) seen += t.key_pos[j] >= 0 && t.key_depth[j] > il;
    for (size_t c = 0; c < cand.size() && seen > layer_cap(p, il, n_layer); ++c) {
      if (t.key_depth[cand[c]] <= il) continue;
      t.key_depth[cand[c]] = static_cast<uint8_t>(il);
      --seen;
    }
  }
}

int64_t max_step_tokens(const KvPolicy& p) {
  if (!p.bounded()) return INT64_MAX;
  if (p.scored()) return p.budget - recent_tokens(p);
  return p.budget - (p.kind == KvPolicyKind::kSink ? p.sinks : 0);
}

std::vector<int64_t> plan_evictions(const KvPolicy& p, const BlockTable& t, int64_t n_new, int32_t block_size) {
  std::vector<int64_t> out;
  const int64_t have = t.num_keys();
  if (!p.bounded() || have + n_new <= p.budget) return out;
  TESSERA_ASSERT(n_new <= max_step_tokens(p));
  const int64_t g = p.granularity > 0 ? p.granularity : block_size;
  const int64_t need = have + n_new - p.budget;
  if (p.scored()) {
    TESSERA_ASSERT(t.scored() && t.mapped());
    std::vector<int64_t> cand = scored_candidates(p, t, n_new);
    std::stable_sort(cand.begin(), cand.end(), [&](int64_t a, int64_t b) {
      if (t.key_depth[a] != t.key_depth[b]) return t.key_depth[a] < t.key_depth[b];
      return lighter(t, a, b);
    });
    cand.resize(static_cast<size_t>(std::min<int64_t>((need + g - 1) / g * g, static_cast<int64_t>(cand.size()))));
    return cand;
  }
  const std::vector<int64_t> live = live_slots(t);
  if (p.kind == KvPolicyKind::kRecompute) return live;
  const int64_t sinks = p.kind == KvPolicyKind::kSink ? std::min<int64_t>(p.sinks, have) : 0;
  const int64_t count = std::min((need + g - 1) / g * g, have - sinks);
  out.assign(live.begin() + sinks, live.begin() + sinks + count);
  return out;
}

}  // namespace tessera::kv
