#include "agent/users.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

TEST(UserMapping, NamesFollowThePatternAndLongOnesStayDistinct) {
  UserMapping users({});
  EXPECT_EQ(*users.nameFor("team-a"), "tessera-team-a");
  UserMapping plain({.pattern = "t_{tenant}_u"});
  EXPECT_EQ(*plain.nameFor("ml"), "t_ml_u");
  UserMapping none({.pattern = ""});
  EXPECT_EQ(*none.nameFor("team-a"), "");  // Tasks run as the agent.
  // Past 32 characters: shortened, with a hash of the tenant.
  const std::string a = *users.nameFor("research-computer-vision-team-one");
  const std::string b = *users.nameFor("research-computer-vision-team-two");
  EXPECT_EQ(a.size(), 32U);
  EXPECT_EQ(b.size(), 32U);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("tessera-research-comput-", 0), 0U) << a;
  EXPECT_EQ(*users.nameFor("research-computer-vision-team-one"), a);  // Stable.
  EXPECT_FALSE(users.nameFor("Team_A").isOk());
  EXPECT_FALSE(users.nameFor("../etc").isOk());
  EXPECT_FALSE(users.nameFor("").isOk());
  EXPECT_FALSE(UserMapping({.pattern = "fixed"}).nameFor("team-a").isOk());
}

TEST(UserMapping, AMissingUserIsCreatedOnlyWhenAllowed) {
  const fs::path dir = fs::temp_directory_path() / ("tessera-users-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // A stand-in for useradd that writes down its arguments.
  const fs::path fake = dir / "useradd";
  std::ofstream(fake) << "#!/bin/sh\necho \"$@\" > " << (dir / "args").string() << "\n";
  fs::permissions(fake, fs::perms::all);
  UserMapping refuse({.pattern = "tessera-test-{tenant}", .create = false});
  auto refused = refuse.ensure("nobody-has-this");
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("useradd --system tessera-test-nobody-has-this"),
            std::string::npos)
      << refused.status().message();
  UserMapping create(
      {.pattern = "tessera-test-{tenant}", .create = true, .useradd = fake.string()});
  auto made = create.ensure("nobody-has-this");
  ASSERT_TRUE(made.isOk()) << made.status().message();
  EXPECT_EQ(*made, "tessera-test-nobody-has-this");
  std::ifstream in(dir / "args");
  std::stringstream args;
  args << in.rdbuf();
  EXPECT_EQ(args.str(),
            "--system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "
            "--comment Tessera tenant nobody-has-this tessera-test-nobody-has-this\n");
  // An existing user is used as it is (no useradd).
  fs::remove(dir / "args");
  UserMapping existing({.pattern = "{tenant}", .create = true, .useradd = fake.string()});
  EXPECT_EQ(*existing.ensure("nobody"), "nobody");
  EXPECT_FALSE(fs::exists(dir / "args"));
  // A failing useradd is an error.
  std::ofstream(dir / "failing") << "#!/bin/sh\nexit 9\n";
  fs::permissions(dir / "failing", fs::perms::all);
  UserMapping failing(
      {.pattern = "tessera-test-{tenant}", .create = true, .useradd = (dir / "failing").string()});
  auto failed = failing.ensure("nobody-has-this");
  ASSERT_FALSE(failed.isOk());
  EXPECT_NE(failed.status().message().find("exited 9"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::agent
