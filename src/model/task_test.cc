#include "model/task.h"

#include <gtest/gtest.h>

namespace tessera::model {
namespace {

TaskRequest whole(int count) {
  TaskRequest r;
  r.cpu = core::MilliCpu{4000};
  r.gpu_count = count;
  r.gpu_milli = core::kWholeGpu;
  return r;
}

TEST(TaskRequestTest, Validation) {
  EXPECT_TRUE(validateTaskRequest(TaskRequest{}).isOk());  // CPU-only.
  EXPECT_TRUE(validateTaskRequest(whole(8)).isOk());

  TaskRequest frac = whole(1);
  frac.gpu_milli = core::MilliGpu{250};
  frac.isolation = Isolation::kProcess;
  EXPECT_TRUE(validateTaskRequest(frac).isOk());
  EXPECT_TRUE(frac.isFractional());

  TaskRequest frac_hw = frac;
  frac_hw.isolation = Isolation::kHardware;
  EXPECT_EQ(validateTaskRequest(frac_hw).message(),
            "a fractional GPU cannot give hardware isolation; ask for a MIG profile or a whole "
            "GPU, or accept 'process' isolation");

  TaskRequest frac_multi = frac;
  frac_multi.gpu_count = 2;
  EXPECT_EQ(validateTaskRequest(frac_multi).message(),
            "a fractional GPU share (250 milli) is only allowed with gpu count 1");

  TaskRequest zero = whole(1);
  zero.gpu_milli = core::MilliGpu{0};
  EXPECT_FALSE(validateTaskRequest(zero).isOk());
  TaskRequest over = whole(1);
  over.gpu_milli = core::MilliGpu{1001};
  EXPECT_FALSE(validateTaskRequest(over).isOk());

  TaskRequest mig = whole(1);
  mig.mig_profile = "3g.40gb";
  EXPECT_TRUE(validateTaskRequest(mig).isOk());
  mig.gpu_count = 2;
  EXPECT_FALSE(validateTaskRequest(mig).isOk());

  TaskRequest cpu_only_with_share;
  cpu_only_with_share.gpu_milli = core::MilliGpu{100};
  EXPECT_FALSE(validateTaskRequest(cpu_only_with_share).isOk());

  TaskRequest neg;
  neg.cpu = core::MilliCpu{-1};
  EXPECT_EQ(validateTaskRequest(neg).message(), "cpu must not be negative");
}

TEST(ImageRefTest, ParsesTheThreeKindsAndRefusesTheRest) {
  struct Case {
    std::string ref;
    bool ok;
    ImageRef::Kind kind;
    std::string path, tag, reference;
  };
  const Case cases[] = {
      {"oci:/images/busybox", true, ImageRef::Kind::kOciLayout, "/images/busybox", "", ""},
      {"oci:/images/busybox:latest", true, ImageRef::Kind::kOciLayout, "/images/busybox", "latest",
       ""},
      {"oci:/img:dir/x", true, ImageRef::Kind::kOciLayout, "/img:dir/x", "", ""},
      {"oci-archive:/tmp/b.tar", true, ImageRef::Kind::kOciArchive, "/tmp/b.tar", "", ""},
      {"nvcr.io/nvidia/pytorch:24.01-py3", true, ImageRef::Kind::kRegistry, "", "24.01-py3",
       "nvcr.io/nvidia/pytorch:24.01-py3"},
      {"docker://busybox", true, ImageRef::Kind::kRegistry, "", "latest", "busybox"},
      {"docker://busybox@sha256:abc", false, {}, "", "", ""},
      {"", false, {}, "", "", ""},
      {"oci:relative", false, {}, "", "", ""},
      {"oci:/a/../etc", false, {}, "", "", ""},
      {"oci:/a//b", false, {}, "", "", ""},
      {"oci:/a/b:bad tag", false, {}, "", "", ""},
      {"oci:/a/b:", false, {}, "", "", ""},
      {"oci-archive:", false, {}, "", "", ""},
      {"oci-archive:/x/./y.tar", false, {}, "", "", ""},
      {"oci-archive:/x\ny.tar", false, {}, "", "", ""},
      {"bad host/x", false, {}, "", "", ""},
      {"/abs/path", false, {}, "", "", ""},
      {"repo:", false, {}, "", "", ""},
  };
  for (const Case& c : cases) {
    auto r = parseImageRef(c.ref);
    ASSERT_EQ(r.isOk(), c.ok) << c.ref << ": " << (r.isOk() ? "" : r.status().message());
    if (!c.ok) {
      EXPECT_NE(r.status().message().find("image"), std::string::npos) << r.status().message();
      continue;
    }
    EXPECT_EQ(r->kind, c.kind) << c.ref;
    EXPECT_EQ(r->path, c.path) << c.ref;
    EXPECT_EQ(r->tag, c.tag) << c.ref;
    EXPECT_EQ(r->reference, c.reference) << c.ref;
  }
}

// Registry references are read as Docker reads them, and a bad one is refused saying which part.
TEST(ImageRefTest, RegistryReferencesNameTheirRegistryRepositoryTagAndDigest) {
  const std::string hex(64, 'a');
  struct Case {
    std::string ref, registry, repository, tag, digest;
  };
  const Case cases[] = {
      {"busybox", "docker.io", "library/busybox", "latest", ""},
      {"team/trainer:2.4", "docker.io", "team/trainer", "2.4", ""},
      {"nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io", "nvidia/pytorch", "24.01-py3", ""},
      {"127.0.0.1:5000/team-a/busybox:1", "127.0.0.1:5000", "team-a/busybox", "1", ""},
      {"localhost/x", "localhost", "x", "latest", ""},
      {"reg.example:443/a/b/c@sha256:" + hex, "reg.example:443", "a/b/c", "", "sha256:" + hex},
      {"reg.example/a:v1@sha256:" + hex, "reg.example", "a", "v1", "sha256:" + hex},
  };
  for (const Case& c : cases) {
    auto r = parseImageRef(c.ref);
    ASSERT_TRUE(r.isOk()) << c.ref << ": " << r.status().message();
    EXPECT_EQ(r->kind, ImageRef::Kind::kRegistry);
    EXPECT_EQ(r->registry, c.registry) << c.ref;
    EXPECT_EQ(r->repository, c.repository) << c.ref;
    EXPECT_EQ(r->tag, c.tag) << c.ref;
    EXPECT_EQ(r->digest, c.digest) << c.ref;
  }
  const std::pair<std::string, std::string> bad[] = {
      {"Team/Image:1", "name part 'Team'"},   {"reg.example/a@sha256:abc", "digest"},
      {"reg.example/a@md5:" + hex, "digest"}, {"reg.example/a:-x", "tag '-x'"},
      {"reg.example:99999999/a", "port"},     {"reg.example/a..b", "name part 'a..b'"},
      {"reg.example/-a", "name part '-a'"},
  };
  for (const auto& [ref, why] : bad) {
    auto r = parseImageRef(ref);
    ASSERT_FALSE(r.isOk()) << ref;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tessera::model
