// Hugging Face model folders: config.json, model.safetensors (or shards
// model-0000X-of-0000N.safetensors with model.safetensors.index.json),
// tokenizer.json and tokenizer_config.json.
//
// A folder is read as the model file llama.cpp's converter would make of it
// (a gguf::File view, gguf::File::assemble): config.json's keys become the
// architecture's GGUF metadata, HF tensor names become GGUF names (one table
// per architecture family, hf_config.cc), and the tensors are used in place
// from the safetensors mappings. So an architecture file, the hyperparameter
// reader and the loader's "every key and tensor used" check do not know
// where the weights came from, and `tessera convert` writes the view.
//
// Three things the converter changes are changed here too, into owned
// buffers: the rows of q_proj / k_proj of the llama family are permuted from
// HF's rotate-half layout to GGUF's interleaved pairs (llama.cpp's
// `permute`), so the model runs with the same normal-ordered RoPE, and the
// same summation order, as its GGUF: logits are bit for bit those of the
// GGUF (running NeoX-ordered RoPE on the unpermuted rows would avoid the copy
// of q/k, ~9% of Llama 3.2 1B's weights, but sum attention scores in another
// order); Gemma's RMSNorm weights get their 1 added (HF computes x * (1 + w));
// Llama 3's rope_scaling becomes rope_freqs.weight and Phi-3's LongRoPE
// factor lists rope_factors_short / rope_factors_long.
//
// Everything in config.json is either translated, checked against what
// Tessera computes (hidden_act, attention_bias, ...), or in one list of keys
// that do not change the model (hf_config.cc); anything else is refused
// naming it, as the GGUF loader does.
#pragma once

#include <cstdint>
#include <string>

#include "format/gguf.h"

namespace tessera::hf {

// Whether `path` is a directory (a Hugging Face folder is one).
bool is_folder(const std::string& path);

// The folder as a model file. Throws Error(kIo) / Error(kCorruptFile) with
// one line naming the file, key or tensor that is missing or wrong.
gguf::File open_folder(const std::string& dir);

// The folder's tokenizer.json (its tokenizer_config.json is read beside it).
std::string tokenizer_json_path(const std::string& dir);

// Writes the Hugging Face twin of a model file (the inverse of open_folder):
// config.json and model.safetensors, or shards of at most max_shard_bytes
// each with their index when max_shard_bytes > 0. Tensors must be F32, F16
// or BF16. Throws Error(kInvalidArgument) for what HF's classes cannot
// express.
struct ExportOptions {
  int64_t max_shard_bytes = 0;
};
void export_folder(const gguf::File& file, const std::string& dir, const ExportOptions& options = {});

// A GGUF tensor name's HF name in the folder's family ("" when none), for
// messages about tensors the model needs.
std::string hf_tensor_name(const gguf::File& view, const std::string& gguf_name);

}  // namespace tessera::hf
