#include "adapters/random_lora.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"

namespace tessera::adapters {

uint32_t parse_lora_targets(const std::string& list) {
  if (list == "all") return kAllLoraTargets;
  static const char* kShortNames[kNumLoraTargets] = {"q", "k", "v", "o", "gate", "up", "down"};
  uint32_t mask = 0;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int t = 0;
    while (t < kNumLoraTargets && item != kShortNames[t]) ++t;
    TESSERA_CHECK(t < kNumLoraTargets, kInvalidArgument, "unknown LoRA target '{}' (q, k, v, o, gate, up, down, all)",
                  item);
    mask |= 1u << t;
  }
  TESSERA_CHECK(mask != 0, kInvalidArgument, "no LoRA targets in '{}'", list);
  return mask;
}

std::shared_ptr<const LoraAdapter> random_lora(const ModelConfig& base, int64_t rank, uint32_t targets, uint64_t seed) {
  TESSERA_CHECK(rank >= 1, kInvalidArgument, "LoRA rank {} < 1", rank);
  Rng rng(seed);
  auto a = std::make_shared<LoraAdapter>();
  a->name = "random-r" + std::to_string(rank) + "-" + std::to_string(seed);
  a->layers.resize(static_cast<size_t>(base.n_layer));
  for (auto& layer : a->layers) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if ((targets & (1u << t)) == 0) continue;
      LoraPair& p = layer[static_cast<size_t>(t)];
      const auto [in, out] = lora_target_shape(base, static_cast<LoraTarget>(t));
      p.rank = rank;
      p.in = in;
      p.out = out;
      p.scale = 1.0f;
      p.a.resize(static_cast<size_t>(rank * in));
      p.b.resize(static_cast<size_t>(rank * out));
      const float sa = 2.0f / std::sqrt(static_cast<float>(in)), sb = 1.0f / std::sqrt(static_cast<float>(rank));
      for (float& v : p.a) v = (rng.uniform() - 0.5f) * sa;
      for (float& v : p.b) v = (rng.uniform() - 0.5f) * sb;
    }
  }
  stamp_content_hash(*a);
  return a;
}

}  // namespace tessera::adapters
