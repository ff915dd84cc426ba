// A progress bar on stderr for long work. Silent for the first second, so short runs print
// nothing; on a terminal it redraws one line, elsewhere it prints a line every 10%.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

namespace tessera::cli {

class Progress {
 public:
  Progress(std::string label, size_t total, bool enabled);
  ~Progress();
  void add(size_t n);
  void finish();

 private:
  void draw(bool final);

  std::mutex mu_;  // Guards everything below.
  std::string label_;
  size_t total_;
  size_t done_ = 0;
  bool enabled_;
  bool tty_;
  bool shown_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace tessera::cli
