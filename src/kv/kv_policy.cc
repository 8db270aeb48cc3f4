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
  }
  return "?";
}

std::optional<KvPolicyKind> parse_kv_policy(std::string_view name) {
  for (KvPolicyKind k : {KvPolicyKind::kDense, KvPolicyKind::kWindow, KvPolicyKind::kRecompute, KvPolicyKind::kSink}) {
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
  return "";
}

int64_t max_step_tokens(const KvPolicy& p) {
  if (!p.bounded()) return INT64_MAX;
  return p.budget - (p.kind == KvPolicyKind::kSink ? p.sinks : 0);
}

std::vector<int64_t> plan_evictions(const KvPolicy& p, const BlockTable& t, int64_t n_new, int32_t block_size) {
  std::vector<int64_t> out;
  const int64_t have = t.num_keys();
  if (!p.bounded() || have + n_new <= p.budget) return out;
  TESSERA_ASSERT(n_new <= max_step_tokens(p));
  // Live slots in token order (a dense table: slot j holds token j).
  std::vector<int64_t> live;
  if (t.mapped()) {
    for (int64_t j = 0; j < static_cast<int64_t>(t.key_pos.size()); ++j) {
      if (t.key_pos[j] >= 0) live.push_back(j);
    }
    std::sort(live.begin(), live.end(), [&](int64_t a, int64_t b) { return t.key_tok[a] < t.key_tok[b]; });
  } else {
    for (int64_t j = 0; j < t.num_tokens; ++j) live.push_back(j);
  }
  if (p.kind == KvPolicyKind::kRecompute) return live;
  const int64_t sinks = p.kind == KvPolicyKind::kSink ? std::min<int64_t>(p.sinks, have) : 0;
  const int64_t g = p.granularity > 0 ? p.granularity : block_size;
  const int64_t need = have + n_new - p.budget;
  const int64_t count = std::min((need + g - 1) / g * g, have - sinks);
  out.assign(live.begin() + sinks, live.begin() + sinks + count);
  return out;
}

}  // namespace tessera::kv
