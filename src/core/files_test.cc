#include "core/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tessera::core {
namespace {

namespace fs = std::filesystem;

unsigned modeOf(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

TEST(FilesTest, RestrictToOwnerTakesAwayWhatGroupAndOthersHad) {
  const fs::path dir = fs::temp_directory_path() / ("tessera-files-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const struct {
    unsigned before;
    std::optional<unsigned> reported;  // The old mode, when it was changed.
    unsigned after;
  } cases[] = {
      {0644, 0644, 0600}, {0640, 0640, 0600},         {0604, 0604, 0600},
      {0755, 0755, 0700}, {0600, std::nullopt, 0600}, {0400, std::nullopt, 0400},
  };
  for (const auto& c : cases) {
    const fs::path f = dir / ("f" + std::to_string(c.before));
    std::ofstream(f) << "key";
    ASSERT_EQ(::chmod(f.c_str(), c.before), 0);
    EXPECT_EQ(openToOthers(f.string()), c.reported) << std::oct << c.before;
    auto was = restrictToOwner(f.string());
    ASSERT_TRUE(was.isOk()) << was.status().message();
    EXPECT_EQ(*was, c.reported) << std::oct << c.before;
    EXPECT_EQ(modeOf(f), c.after) << std::oct << c.before;
    EXPECT_EQ(openToOthers(f.string()), std::nullopt);
  }
  // Nothing there: nothing to do.
  auto none = restrictToOwner((dir / "none").string());
  ASSERT_TRUE(none.isOk());
  EXPECT_EQ(*none, std::nullopt);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::core
