// Fixed-point resource quantities with their unit in the type.
//
// All capacity and quota arithmetic in Tessera is integer: CPU in milli-cores, memory in MiB,
// GPU share in milli-GPU (1000 = one whole GPU). Mixing units is a compile error:
//
//   MilliCpu cpu{4000};
//   MiB mem{16384};
//   cpu + mem;            // does not compile
//   cpu - MilliCpu{500};  // MilliCpu{3500}
#pragma once

#include <compare>
#include <cstdint>
#include <ostream>

namespace tessera::core {

template <typename Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(int64_t value) : value_(value) {}

  constexpr int64_t value() const { return value_; }

  constexpr auto operator<=>(const Quantity&) const = default;

  constexpr Quantity operator+(Quantity o) const { return Quantity(value_ + o.value_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(value_ - o.value_); }
  constexpr Quantity operator*(int64_t k) const { return Quantity(value_ * k); }
  constexpr Quantity& operator+=(Quantity o) {
    value_ += o.value_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    value_ -= o.value_;
    return *this;
  }
  constexpr Quantity operator-() const { return Quantity(-value_); }

  friend std::ostream& operator<<(std::ostream& os, Quantity q) { return os << q.value_; }

 private:
  int64_t value_ = 0;
};

struct MilliCpuTag {};
struct MiBTag {};
struct MilliGpuTag {};

using MilliCpu = Quantity<MilliCpuTag>;  // 1000 = one CPU core.
using MiB = Quantity<MiBTag>;            // Mebibytes (2^20 bytes), main or GPU memory.
using MilliGpu = Quantity<MilliGpuTag>;  // 1000 = one whole GPU.

inline constexpr MilliGpu kWholeGpu{1000};

}  // namespace tessera::core
