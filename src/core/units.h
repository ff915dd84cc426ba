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
#include <string>

namespace tessera::core {

// 1500 -> "1.5", 2000 -> "2", -500 -> "-0.5": thousandths as a decimal.
inline std::string milliText(int64_t milli) {
  std::string out = std::to_string(milli / 1000);
  if (milli < 0 && milli > -1000) {
    out = "-0";
  }
  const int64_t frac = milli % 1000 < 0 ? -(milli % 1000) : milli % 1000;
  if (frac != 0) {
    std::string digits = std::to_string(frac + 1000).substr(1);  // Three digits.
    digits.erase(digits.find_last_not_of('0') + 1);
    out += "." + digits;
  }
  return out;
}

// "24 GPUs", "1 GPU", "0.5 GPU", "0.142 GPU": an amount of milli-GPU (>= 0) as people count GPUs.
inline std::string gpuText(int64_t milli) {
  return milliText(milli) + (milli <= 1000 ? " GPU" : " GPUs");
}

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
