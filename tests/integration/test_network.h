// Several "machines" on one: network namespaces joined by a bridge, for the integration tests
// whose processes must reach each other at different addresses (a distributed workload's
// rendezvous). Needs root (CAP_NET_ADMIN) and iproute2.
//
//   TestNetwork net(3);                   // 10.213.X.1 here, 10.213.X.10-12 in the namespaces
//   Process agent(args, out, net.ns(0));  // runs in the first namespace
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tessera::integration {

class TestNetwork {
 public:
  // `hosts` namespaces; names and the subnet come from this process's pid, so that tests running
  // at once do not meet. ok() says whether it was all made.
  explicit TestNetwork(int hosts) {
    const int id = static_cast<int>(::getpid() % 100000);
    subnet_ = "10.213." + std::to_string(::getpid() % 250) + ".";
    bridge_ = "tsb" + std::to_string(id);
    ok_ = sh("ip link add " + bridge_ + " type bridge") &&
          sh("ip addr add " + hostAddress() + "/24 dev " + bridge_) &&
          sh("ip link set " + bridge_ + " up");
    for (int i = 0; i < hosts && ok_; ++i) {
      const std::string ns = "tessera-" + std::to_string(id) + "-" + std::to_string(i);
      const std::string here = "tsh" + std::to_string(id) + "x" + std::to_string(i);
      const std::string there = "tsn" + std::to_string(id) + "x" + std::to_string(i);
      namespaces_.push_back(ns);
      ok_ =
          sh("ip netns add " + ns) && sh("ip link add " + here + " type veth peer name " + there) &&
          sh("ip link set " + there + " netns " + ns) &&
          sh("ip link set " + here + " master " + bridge_ + " up") &&
          sh("ip -n " + ns + " addr add " + address(i) + "/24 dev " + there) &&
          sh("ip -n " + ns + " link set " + there + " up") && sh("ip -n " + ns + " link set lo up");
    }
  }
  ~TestNetwork() {
    for (const std::string& ns : namespaces_) {
      sh("ip netns del " + ns);  // Its end of the veth pair goes, and so does ours.
    }
    sh("ip link del " + bridge_);
  }
  TestNetwork(const TestNetwork&) = delete;
  TestNetwork& operator=(const TestNetwork&) = delete;

  bool ok() const { return ok_; }
  const std::string& ns(int i) const { return namespaces_.at(static_cast<size_t>(i)); }
  std::string address(int i) const { return subnet_ + std::to_string(10 + i); }
  std::string hostAddress() const { return subnet_ + "1"; }  // This namespace's, on the bridge.

 private:
  static bool sh(const std::string& cmd) { return std::system((cmd + " 2>&1").c_str()) == 0; }

  std::string subnet_;
  std::string bridge_;
  std::vector<std::string> namespaces_;
  bool ok_ = false;
};

}  // namespace tessera::integration
