// Random LoRA adapters of any rank on any set of a model's linears: for
// benchmarks (bench/multilora) and tests, where many distinct adapters are
// needed and their values only have to be plausible (A ~ U(-1,1)/sqrt(in),
// B ~ U(-0.5,0.5)/sqrt(rank): deltas small beside the base product).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "format/model_config.h"
#include "adapters/lora.h"

namespace tessera::adapters {

// Bit t of `targets` set: LoraTarget t is adapted on every layer.
constexpr uint32_t kAllLoraTargets = (1u << kNumLoraTargets) - 1;
constexpr uint32_t lora_target_bit(LoraTarget t) { return 1u << static_cast<int>(t); }

// Parses "all" or a comma list of q,k,v,o,gate,up,down into a target mask.
// Throws Error(kInvalidArgument) naming an unknown one.
uint32_t parse_lora_targets(const std::string& list);

std::shared_ptr<const LoraAdapter> random_lora(const ModelConfig& base, int64_t rank, uint32_t targets, uint64_t seed);

}  // namespace tessera::adapters
