#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace tessera::cli {

Progress::Progress(std::string label, size_t total, bool enabled)
    : label_(std::move(label)),
      total_(total == 0 ? 1 : total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::add(size_t n) {
  if (!enabled_) {
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  done_ += n;
  draw(false);
}

void Progress::finish() {
  if (!enabled_) {
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (shown_) {
    done_ = total_;
    draw(true);
  }
  enabled_ = false;
}

void Progress::draw(bool final) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (!final && elapsed < 1.0) {
    return;
  }
  const double frac = static_cast<double>(done_) / static_cast<double>(total_);
  if (tty_) {
    if (!final && now - last_draw_ < std::chrono::milliseconds(100)) {
      return;
    }
    last_draw_ = now;
    const int width = 30;
    const int filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    const double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0;
    std::fputs(fmt::format("\r{} [{}] {:3.0f}%  {:.0f}s elapsed, ~{:.0f}s left ", label_, bar,
                           100 * frac, elapsed, eta)
                   .c_str(),
               stderr);
    if (final) {
      std::fputc('\n', stderr);
    }
  } else {
    const int decile = static_cast<int>(frac * 10);
    if (decile == last_decile_ && !final) {
      return;
    }
    if (final && last_decile_ == 10) {
      return;
    }
    last_decile_ = final ? 10 : decile;
    std::fputs(fmt::format("{}: {:.0f}% ({:.0f}s)\n", label_, 100 * frac, elapsed).c_str(), stderr);
  }
  std::fflush(stderr);
  shown_ = true;
}

}  // namespace tessera::cli
