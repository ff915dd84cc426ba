// Helpers shared by the audit tests: sample events, temp dirs, reading files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "audit/record.h"

namespace tessera::audit::testing {

// A request (even i) or response (odd i) of `tenant`, with a token in the body.
inline AuditEvent sampleEvent(int i, const std::string& tenant = "team-1") {
  AuditEvent e;
  e.type = i % 2 == 0 ? AuditType::kRequest : AuditType::kResponse;
  e.request_id = "req-" + std::to_string(i / 2);
  e.tenant = tenant;
  e.auth = {"accessor-" + tenant, {"default", tenant + "-dev"}};
  e.request = {"POST",
               "/v1/tenants/" + tenant + "/workloads",
               "10.0.0.7",
               {{"name", "train-" + std::to_string(i)}, {"gpus", i % 8}}};
  if (e.type == AuditType::kResponse) {
    e.response = {200, {{"id", "wl-" + std::to_string(i)}}};
  }
  return e;
}

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "-" + info->name();
    std::replace(name.begin(), name.end(), '/', '_');
    path_ = std::filesystem::temp_directory_path() /
            ("tessera-audit-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void writeFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

inline std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
  }
  return lines;
}

inline std::string joinLines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) {
    out += l + "\n";
  }
  return out;
}

}  // namespace tessera::audit::testing
