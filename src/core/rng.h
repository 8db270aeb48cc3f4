// The project's random numbers: xoshiro256** seeded by splitmix64. Small,
// fast, and the same on every platform (std:: distributions are not), so a
// seed reproduces a sample, or a random model, anywhere. In core/ because
// both the sampler (engine/) and the random-model writer (model/) use it.
#pragma once

#include <cstdint>

namespace tessera {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  float uniform();  // [0, 1) with 24 bits
 private:
  uint64_t s_[4];
};

}  // namespace tessera
