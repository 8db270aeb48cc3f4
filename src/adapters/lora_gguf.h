// LoRA adapters from llama.cpp's adapter GGUF (what convert_lora_to_gguf.py
// writes and `llama-cli --lora` reads): general.type = "adapter",
// adapter.type = "lora", adapter.lora.alpha, and for each adapted linear
// `<tensor>.lora_a` ([in, rank] in GGUF's ne order: rank rows of `in`) and
// `<tensor>.lora_b` ([rank, out]: out rows of `rank`), in F32, F16, BF16 or
// Q8_0, on the attention and FFN linears of every layer (attn_q, attn_k,
// attn_v, attn_output, ffn_gate, ffn_up, ffn_down).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "format/model_config.h"
#include "adapters/lora.h"

namespace tessera::adapters {

// Loads `path` for a base model of config `base`; each pair's scale is
// scale * alpha / rank (scale alone when alpha is 0, as llama.cpp does),
// folded into A. Throws Error(kInvalidArgument / kCorruptFile) naming what
// is wrong: not an adapter, another architecture, a tensor of a linear that
// is not adapted here, shapes that do not fit the base, a missing half.
std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const ModelConfig& base, float scale = 1.0f);

// Writes `a` (F32 pairs, scale alpha / rank not folded into A) as
// llama.cpp's adapter GGUF for a base of architecture `arch`: general.type
// "adapter", adapter.type "lora", adapter.lora.alpha; blk.N.<linear>.weight
// .lora_a [rank][in] and .lora_b [out][rank], F32 (tessera finetune).
void write_lora_gguf(const LoraAdapter& a, const std::string& arch, const std::string& path);

// `a` kept in `type` (store_lora): `a` itself for F32, else a copy (a new
// adapter: its own uid).
std::shared_ptr<const LoraAdapter> stored_as(std::shared_ptr<const LoraAdapter> a, kernels::LoraWeightType type);

// Several adapters applied together (their deltas summed): one adapter
// whose pairs stack the ranks (A rows one after the other, B columns side
// by side).
std::shared_ptr<const LoraAdapter> sum_loras(const std::vector<std::shared_ptr<const LoraAdapter>>& adapters);

}  // namespace tessera::adapters
