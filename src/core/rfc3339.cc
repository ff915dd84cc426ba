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

std::optional<WallTime> parseRfc3339(std::string_view text) {
  using namespace std::chrono;
  auto digits = [&](size_t at, size_t n) -> std::optional<int> {
    if (at + n > text.size()) {
      return std::nullopt;
    }
    int v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (text[i] < '0' || text[i] > '9') {
        return std::nullopt;
      }
      v = v * 10 + (text[i] - '0');
    }
    return v;
  };
  auto is = [&](size_t at, char c) { return at < text.size() && text[at] == c; };
  const auto y = digits(0, 4);
  const auto mo = digits(5, 2);
  const auto d = digits(8, 2);
  const auto h = digits(11, 2);
  const auto mi = digits(14, 2);
  const auto s = digits(17, 2);
  if (!y || !mo || !d || !h || !mi || !s || !is(4, '-') || !is(7, '-') || !is(10, 'T') ||
      !is(13, ':') || !is(16, ':') || *h > 23 || *mi > 59 || *s > 59) {
    return std::nullopt;
  }
  const year_month_day ymd{year(*y), month(static_cast<unsigned>(*mo)),
                           day(static_cast<unsigned>(*d))};
  if (!ymd.ok()) {
    return std::nullopt;
  }
  size_t at = 19;
  int millis = 0;
  if (is(at, '.')) {
    size_t n = 0;
    while (at + 1 + n < text.size() && text[at + 1 + n] >= '0' && text[at + 1 + n] <= '9') {
      if (n < 3) {
        millis = millis * 10 + (text[at + 1 + n] - '0');
      }
      ++n;
    }
    if (n == 0 || n > 9) {
      return std::nullopt;
    }
    for (size_t k = n; k < 3; ++k) {
      millis *= 10;
    }
    at += 1 + n;
  }
  if (at + 1 != text.size() || text[at] != 'Z') {
    return std::nullopt;
  }
  const auto t = sys_days(ymd) + hours(*h) + minutes(*mi) + seconds(*s) + milliseconds(millis);
  return WallTime(duration_cast<Duration>(t.time_since_epoch()));
}

}  // namespace tessera::core
