// Soft prompts from files: a [n_virtual, n_embd] matrix of input embeddings
// (PEFT's prompt-tuning `prompt_embeddings`), as
//  - NumPy `.npy` (version 1-3, C order, 2-D, little-endian float32 or
//    float16: `numpy.save(path, emb.astype(numpy.float32))`), or
//  - GGUF: one 2-D tensor (ne = [n_embd, n_virtual]; F32, F16 or BF16),
//    named `soft_prompt` when the file holds several.
// The format is told by the file's magic, not its name.
#pragma once

#include <memory>
#include <string>

#include "format/model_config.h"
#include "adapters/soft_prompt.h"

namespace tessera::adapters {

// Throws Error(kInvalidArgument / kCorruptFile) naming what is wrong: an
// unknown format, a shape that is not 2-D or whose width is not the base
// model's n_embd, a dtype other than the above, truncated data, values
// that are not finite.
std::shared_ptr<const SoftPrompt> load_soft_prompt(const std::string& path, const ModelConfig& base);

// A NumPy format 1.0 file's bytes: the header dict ('descr' as given, e.g.
// "<f4"; 'shape' as Python writes a tuple, e.g. "(16, 64)"), padded with
// spaces to a multiple of 64 bytes, then `bytes` of data. What
// tessera finetune --method prompt writes, and the tests' files.
std::string npy_bytes(const std::string& descr, const std::string& shape, const void* data, size_t bytes,
                      bool fortran_order = false);

}  // namespace tessera::adapters
