// Helpers shared by the integration tests that run the real `tessera` binary.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera::integration {

// The `tessera` binary under test (CTest sets TESSERA_BINARY_DIR).
inline std::string binary() {
  const char* d = std::getenv("TESSERA_BINARY_DIR");
  return std::string(d != nullptr ? d : ".") + "/tessera";
}

// A file's whole content ("" if it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tessera::integration
