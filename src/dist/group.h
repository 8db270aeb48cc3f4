// The collectives a tensor-parallel model needs (model/tensor_split.h,
// model/tensor_parallel.h), whoever carries them: dist::World across
// processes (MPI), or threads of one process in tests.
#pragma once

#include <span>
#include <string>

namespace tessera::dist {

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // values = the element-wise sum of every rank's values, on every rank,
  // the same bits on each.
  virtual void sum(std::span<float> values) = 0;
  // root's value, on every rank (the others' `value` is ignored).
  virtual std::string broadcast(std::string value, int root) = 0;
  // On root: all = every rank's part, in rank order (parts of one size;
  // all.size() = ranks x part.size()). Elsewhere `all` is not touched.
  virtual void gather(std::span<const float> part, std::span<float> all, int root) = 0;
  // The same on every rank.
  virtual void all_gather(std::span<const float> part, std::span<float> all) = 0;
};

}  // namespace tessera::dist
