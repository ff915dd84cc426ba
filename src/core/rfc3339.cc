#include "core/rfc3339.h"

#include <fmt/format.h>

#include <chrono>

namespace tessera::core {
namespace {

std::string format(WallTime t, bool millis) {
  using namespace std::chrono;
  const auto ms = floor<milliseconds>(t);
  const auto day = floor<days>(ms);
  const year_month_day ymd{day};
  const hh_mm_ss hms{ms - day};
  std::string out =
      fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", static_cast<int>(ymd.year()),
                  static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                  hms.hours().count(), hms.minutes().count(), hms.seconds().count());
  if (millis) {
    out += fmt::format(".{:03}", hms.subseconds().count());
  }
  return out + "Z";
}

}  // namespace

std::string formatRfc3339(WallTime t) { return format(t, false); }
std::string formatRfc3339Millis(WallTime t) { return format(t, true); }

}  // namespace tessera::core
