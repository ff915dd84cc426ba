#include "core/units.h"

#include <gtest/gtest.h>

#include <type_traits>

namespace tessera::core {
namespace {

template <typename A, typename B>
concept Addable = requires(A a, B b) {
  a + b;
};

TEST(UnitsTest, ArithmeticAndComparison) {
  MilliCpu a{1500};
  a += MilliCpu{500};
  EXPECT_EQ(a, MilliCpu{2000});
  EXPECT_LT(MilliGpu{100} + MilliGpu{200}, MilliGpu{301});
  // Fixed point: 0.1 + 0.2 GPU is exactly 0.3 GPU.
  EXPECT_EQ(MilliGpu{100} + MilliGpu{200}, MilliGpu{300});
  EXPECT_EQ(MiB{3} * 4, MiB{12});
  EXPECT_EQ(-MiB{3}, MiB{0} - MiB{3});
}

TEST(UnitsTest, UnitsDoNotMix) {
  static_assert(Addable<MilliCpu, MilliCpu>);
  static_assert(!Addable<MilliCpu, MiB>);
  static_assert(!Addable<MilliGpu, MilliCpu>);
  static_assert(!std::is_convertible_v<int64_t, MilliGpu>);
  SUCCEED();
}

}  // namespace
}  // namespace tessera::core
