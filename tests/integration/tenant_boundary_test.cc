// Issue #36, "a tenant's task can never become its node or another tenant", through the real
// `tessera dev` binary over HTTPS: what a parent token may give a child (its power, judged in
// each policy's own scope, not policy names), a child stopping with its parent, a GPU limit of 0
// meaning zero, and a pool dedicated without a tenant.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "process.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tessera::integration::Client;
using tessera::integration::Process;
using tessera::integration::Response;
using tessera::integration::slurp;

class TenantBoundaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-tb-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    server_ = std::make_unique<Process>(
        std::vector<std::string>{"dev", "--data-dir", dir_.string(), "--addr", "127.0.0.1:0"},
        dir_ / "out.txt");
    for (int i = 0; i < 600; ++i) {
      if (fs::exists(dir_ / "dev.json")) {
        dev_ = json::parse(slurp(dir_ / "dev.json"), nullptr, false);
        if (dev_.is_object() && dev_.value("pid", 0) == server_->pid()) {
          break;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(dev_.value("pid", 0), server_->pid()) << server_->output() << server_->errors();
    client_ = std::make_unique<Client>(dev_["address"].get<std::string>(),
                                       slurp(dev_["ca_cert"].get<std::string>()));
  }
  void TearDown() override {
    if (server_) {
      EXPECT_EQ(server_->stop(SIGTERM), 0);
    }
    fs::remove_all(dir_);
  }

  const Client& c() const { return *client_; }
  std::string root() const { return dev_["root_token"]; }
  std::string demo() const { return dev_["tenant_token"]; }

  // A token made by `parent` with `body` (200 expected), its secret.
  std::string mint(const std::string& path, const std::string& parent, const json& body) {
    Response r = c().call("POST", path, parent, body);
    EXPECT_EQ(r.status, 200U) << path << " " << body.dump() << ": " << r.raw;
    return r.body.value("auth", json::object()).value("client_token", "");
  }
  void adminPolicy(const std::string& name, const json& paths) {
    ASSERT_EQ(c().call("POST", "/v1/sys/policies/" + name, root(), {{"path", paths}}).status, 204U);
  }
  static json caps(std::initializer_list<const char*> names) {
    json c = json::array();
    for (const char* n : names) {
      c.push_back(n);
    }
    return {{"capabilities", c}};
  }

  fs::path dir_;
  json dev_;
  std::unique_ptr<Process> server_;
  std::unique_ptr<Client> client_;
};

// Item 7: dedicating a pool without naming its tenant was a 500.
TEST_F(TenantBoundaryTest, DedicatingAPoolWithoutATenantIsABadRequest) {
  Response r = c().call("POST", "/v1/sys/pools/gpu-pool", root(), json::object());
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("tenant: required"), std::string::npos) << r.raw;
  r = c().call("POST", "/v1/sys/pools/gpu-pool", root(), {{"tenant", 7}});
  EXPECT_EQ(r.status, 400U) << r.raw;
  r = c().call("POST", "/v1/sys/pools/gpu-pool", root(), {{"tenant", "demo"}});
  EXPECT_EQ(r.status, 200U) << r.raw;
}

}  // namespace
