// Tensor parallelism (Megatron-LM's split; docs/DISTRIBUTED.md): a model
// loaded as shard `rank` of `size` holds a 1/size share of every layer's
// heads and FFN neurons. Q, K, V, gate and up keep their rows for those heads
// and neurons (whole heads: each rank attends over its own heads, its KV cache
// holds only them); the output projection and down keep the matching
// columns, so each rank's product is a partial sum of the residual update,
// which `group` sums over the ranks before it joins the stream (one
// all-reduce after attention and one after the FFN, per layer). Biases of
// those products are added by rank 0 only. Norms, embeddings and the output
// matrix are whole on every rank.
#pragma once

#include "dist/group.h"

namespace tessera {

struct TensorSplit {
  int rank = 0;
  int size = 1;
  dist::Group* group = nullptr;  // required when size > 1
  bool split() const { return size > 1; }
};

}  // namespace tessera
