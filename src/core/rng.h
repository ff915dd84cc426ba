// Injected randomness. Every random choice in Tessera (shuffles, tie-breaks, the `random`
// policy) draws from an `Rng` passed in by the caller, so a seed reproduces a run exactly.
//
// The generator is a 64-bit SplitMix-seeded xoshiro256**; bounded draws use Lemire's
// multiply-and-reject method, so results do not depend on the standard library's
// distribution implementations.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace tessera::core {

class Rng {
 public:
  explicit Rng(uint64_t seed);

  // A uniformly distributed 64-bit value.
  uint64_t next();

  // Uniform in [0, bound). `bound` must be > 0.
  uint64_t uniform(uint64_t bound);

  // Uniform in [0, 1).
  double uniformDouble();

  // Fisher-Yates shuffle.
  template <typename T>
  void shuffle(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      size_t j = uniform(i);
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  uint64_t s_[4];
};

}  // namespace tessera::core
