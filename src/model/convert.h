// Writing a model file (a GGUF, or a Hugging Face folder's view,
// format/hf_model.h) as a GGUF with llama.cpp's metadata layout and tensor
// names: `tessera convert`.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "format/gguf.h"

namespace tessera {

struct LoadedModel;

// Every metadata key and tensor of `in`, in its order. With matrix_type, each
// 2-D tensor is stored in that type (quantized row by row from its values in
// f32, as make-model quantizes); 1-D tensors (norms, biases, RoPE factors)
// keep their type. Throws Error(kInvalidArgument) for a matrix whose width is
// not a multiple of the type's block, Error(kIo) on write failure.
// `extra_metadata` is written after in's keys (none may repeat one).
void write_gguf(const gguf::File& in, const std::string& path, std::optional<DType> matrix_type = std::nullopt,
                const std::vector<std::pair<std::string, gguf::Value>>& extra_metadata = {});

// `tessera convert`: write_gguf of the model's file, and for a Hugging Face
// folder its tokenizer.json as tokenizer.ggml.* metadata
// (hf_tokenizer_gguf_metadata, padded to the embedding's rows), so that
// llama.cpp loads the file. A folder without tokenizer.json gets none (with a
// warning: llama.cpp will not load it). Throws as those two do.
void convert_model(const LoadedModel& lm, const std::string& path, std::optional<DType> matrix_type = std::nullopt);

}  // namespace tessera
