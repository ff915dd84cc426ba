// FUZZ_CHECK(condition): what a fuzz target asserts about the code under test. Unlike assert()
// it stays on in release builds, so the corpus replay tests (built with g++ -O3 -DNDEBUG) check
// the same properties libFuzzer does.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                                                 \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (false)
