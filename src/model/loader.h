// Reading a model file with every metadata key and tensor accounted for, so
// a model that loads computes what its authors trained: an architecture
// reads its keys and tensors through a ModelLoader, and finish() refuses the
// file, naming the first key or tensor that was neither used nor in the one
// list of things the loader knows it does not need (loader.cc, kIgnored*).
// That list is logged once per load, at debug level.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/qmoe.h"
#include "format/model_config.h"
#include "format/gguf.h"
#include "model/tensor_split.h"
#include "model/weights.h"

namespace tessera {

class ModelLoader {
 public:
  explicit ModelLoader(const gguf::File& file, const TensorSplit& split = {}) : f_(file), split_(split) {}

  // The share of the model this process holds (model/tensor_split.h).
  const TensorSplit& split() const { return split_; }

  const gguf::File& file() const { return f_; }

  // The hyperparameters (format/model_config.h), their keys marked used.
  ModelConfig read_config(const ConfigOptions& options);

  // A matrix / vector by name with its shape and type checked
  // (model/weights.h); the tensor is marked used.
  kernels::WeightView matrix(const std::string& name, int64_t cols, int64_t rows);
  // Rows [r0, r0 + n) / columns [c0, c0 + n) of it: a tensor-parallel rank's
  // part, only its bytes touched when the file maps on demand (model/weights.h).
  kernels::WeightView matrix_rows(const std::string& name, int64_t cols, int64_t rows, int64_t r0, int64_t n);
  kernels::WeightView matrix_cols(const std::string& name, int64_t cols, int64_t rows, int64_t c0, int64_t n);
  // A W8A8 matrix and its scales (model/weights.h load_w8a8_matrix); both marked used.
  kernels::PreparedWeight w8a8_matrix(const std::string& name, int64_t cols, int64_t rows, MatrixPart part = {});
  std::vector<float> vector(const std::string& name, int64_t n);
  std::vector<float> vectors(const std::string& name, int64_t n, int64_t count);  // model/weights.h load_vectors
  // Expert e's rows / columns of a mixture's 3-D tensor (model/weights.h
  // load_expert_rows / _cols).
  kernels::WeightView expert_rows(const std::string& name, int64_t cols, int64_t rows, int64_t n_expert, int64_t e,
                                  int64_t r0, int64_t n);
  kernels::WeightView expert_cols(const std::string& name, int64_t cols, int64_t rows, int64_t n_expert, int64_t e,
                                  int64_t c0, int64_t n);
  // The same as QMoE codes (the tensor's type is QMOE).
  kernels::QmoeView qmoe_experts(const std::string& name, int64_t cols, int64_t rows, int64_t n_expert);
  bool has_tensor(std::string_view name) const { return f_.find_tensor(name) != nullptr; }

  // Marks a key as read by the caller.
  void use_key(const std::string& key) { keys_.insert(key); }

  // Throws Error(kCorruptFile) for the first metadata key or tensor neither
  // used nor ignorable; logs what was ignored.
  void finish() const;

 private:
  const gguf::File& f_;
  TensorSplit split_;
  std::set<std::string, std::less<>> keys_, tensors_;
};

}  // namespace tessera
