// The one collective a tensor-parallel forward pass needs: after a product
// split over ranks (attention's output projection, the FFN's down
// projection), each rank holds a partial sum of the residual stream's update
// and every rank needs the whole (model/model.h TensorSplit).
#pragma once

#include <span>

namespace tessera::dist {

class Reducer {
 public:
  virtual ~Reducer() = default;
  // values = the element-wise sum of every rank's values, on every rank,
  // the same bits on each.
  virtual void sum(std::span<float> values) = 0;
};

}  // namespace tessera::dist
