// Soft prompts (prompt tuning, Lester et al. 2021): a request's input starts
// with n_virtual learned embeddings in place of token embeddings. The
// engine gives such a request n_virtual placeholder tokens ahead of its
// prompt and the forward pass reads their rows from here
// (ForwardBatch::embd_rows); everything else (KV, positions, scheduling)
// treats them as tokens. Loaded by src/adapters/soft_prompt_file.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adapters/lora.h"

namespace tessera {

// The token id a virtual token carries in the request's token list (any
// valid id: its embedding is never looked up).
constexpr int32_t kSoftPromptPlaceholder = 0;

struct SoftPrompt {
  uint64_t uid = next_lora_uid();  // process-unique: part of the prefix-cache salt
  kvstore::StoreKey content_hash;  // of its rows (stamp_content_hash); empty: not stored beyond RAM
  std::string name;
  int64_t n_virtual = 0, n_embd = 0;
  std::vector<float> embd;  // [n_virtual][n_embd]

  const float* row(int64_t i) const { return embd.data() + i * n_embd; }
  size_t bytes() const { return embd.size() * sizeof(float); }
};

inline void stamp_content_hash(SoftPrompt& sp) {
  kvstore::Hasher128 h;
  h.update_string("soft prompt");
  h.update_value(sp.n_virtual);
  h.update_value(sp.n_embd);
  h.update(sp.embd.data(), sp.embd.size() * sizeof(float));
  sp.content_hash = h.digest();
}

}  // namespace tessera
