#include "agent/oci_image.h"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "agent/container.h"
#include "agent/runtime.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Entry {
  std::string name;
  std::string content;  // A file's.
  char type = 'f';      // 'f' file, 'd' folder, 'l' symbolic link to `content`.
};

// A tar of `entries`, gzip'd when `gzip`, in memory.
std::string makeTar(const std::vector<Entry>& entries, bool gzip) {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (gzip) {
    archive_write_add_filter_gzip(a);
  }
  std::vector<char> buf(size_t{1} << 20);
  size_t used = 0;
  archive_write_open_memory(a, buf.data(), buf.size(), &used);
  for (const Entry& e : entries) {
    archive_entry* ae = archive_entry_new();
    archive_entry_set_pathname(ae, e.name.c_str());
    archive_entry_set_filetype(ae, e.type == 'd' ? AE_IFDIR : e.type == 'l' ? AE_IFLNK : AE_IFREG);
    archive_entry_set_perm(ae, e.type == 'f' ? 0644 : 0755);
    if (e.type == 'l') {
      archive_entry_set_symlink(ae, e.content.c_str());
    }
    archive_entry_set_size(ae, e.type == 'f' ? static_cast<la_int64_t>(e.content.size()) : 0);
    archive_write_header(a, ae);
    if (e.type == 'f') {
      archive_write_data(a, e.content.data(), e.content.size());
    }
    archive_entry_free(ae);
  }
  archive_write_close(a);
  archive_write_free(a);
  return std::string(buf.data(), used);
}

std::string sha256Hex(const std::string& s) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), md);
  std::ostringstream out;
  for (unsigned char c : md) {
    out << std::hex << (c >> 4) << (c & 15);
  }
  return out.str();
}

class OciImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-oci-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "layout" / "blobs" / "sha256");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Stores a blob; returns its hex digest.
  std::string blob(const std::string& content) {
    const std::string hex = sha256Hex(content);
    std::ofstream(dir_ / "layout" / "blobs" / "sha256" / hex, std::ios::binary) << content;
    return hex;
  }
  // An image of `layers` (tars) tagged `tag`, in the layout folder; returns the layers' digests.
  std::vector<std::string> writeImage(const std::vector<std::string>& layers,
                                      const std::string& tag = "latest") {
    json manifest = {{"schemaVersion", 2}, {"layers", json::array()}};
    std::vector<std::string> hexes;
    for (const std::string& l : layers) {
      hexes.push_back(blob(l));
      manifest["layers"].push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar+gzip"},
                                    {"digest", "sha256:" + hexes.back()},
                                    {"size", l.size()}});
    }
    const std::string config =
        json{{"config", {{"Env", {"PATH=/bin", "FROM_IMAGE=1"}}, {"Cmd", {"sh"}}}}}.dump();
    manifest["config"] = {{"digest", "sha256:" + blob(config)}, {"size", config.size()}};
    const std::string m = manifest.dump();
    const json index = {{"schemaVersion", 2},
                        {"manifests",
                         {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                           {"digest", "sha256:" + blob(m)},
                           {"size", m.size()},
                           {"annotations", {{"org.opencontainers.image.ref.name", tag}}}}}}};
    std::ofstream(dir_ / "layout" / "index.json") << index.dump();
    return hexes;
  }
  model::ImageRef layout(const std::string& tag = "") {
    return {model::ImageRef::Kind::kOciLayout, (dir_ / "layout").string(), tag, ""};
  }
  fs::path cache() { return dir_ / "cache"; }

  fs::path dir_;
};

TEST_F(OciImageTest, UnpacksLayersOnceWithWhiteoutsInOverlayForm) {
  const std::vector<std::string> keys = writeImage(
      {makeTar({{"bin", "", 'd'}, {"bin/tool", "v1"}, {"etc", "", 'd'}, {"etc/old", "x"}}, true),
       makeTar({{"etc/.wh.old", ""}, {"etc/new", "y"}, {"opt/.wh..wh..opq", ""}}, false)});
  ImageCache images(cache().string());
  auto img = images.get(layout("latest"));
  ASSERT_TRUE(img.isOk()) << img.status().toString();
  ASSERT_EQ(img->layer_dirs.size(), 2U);
  EXPECT_EQ(img->layer_keys, keys);
  EXPECT_EQ(img->config.cmd, std::vector<std::string>{"sh"});
  EXPECT_EQ(img->config.env[1], "FROM_IMAGE=1");
  std::ifstream tool(img->layer_dirs[0] + "/bin/tool");
  std::string v;
  tool >> v;
  EXPECT_EQ(v, "v1");
  // Layer 2: the whiteout is a 0:0 character device, the opaque folder marked, and no .wh.
  // file is left.
  struct stat st {};
  ASSERT_EQ(::stat((img->layer_dirs[1] + "/etc/old").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, ::makedev(0, 0));
  EXPECT_FALSE(fs::exists(img->layer_dirs[1] + "/etc/.wh.old"));
  char value[4] = {};
  EXPECT_EQ(::getxattr((img->layer_dirs[1] + "/opt").c_str(), "trusted.overlay.opaque", value,
                       sizeof value),
            1);
  EXPECT_EQ(value[0], 'y');
  // Again: from the cache, not unpacked anew.
  ASSERT_EQ(::stat((img->layer_dirs[0] + "/bin/tool").c_str(), &st), 0);
  const ino_t inode = st.st_ino;
  auto again = images.get(layout());  // The only image: no tag needed.
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  ASSERT_EQ(::stat((again->layer_dirs[0] + "/bin/tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, inode);
  // Collection keeps what is named and what get() returned until it is released, removes the
  // rest.
  EXPECT_EQ(images.collect({keys[0]}), 0);
  EXPECT_TRUE(fs::exists(img->layer_dirs[1]));
  images.release(*img);
  EXPECT_EQ(images.collect({keys[0]}), 0);  // `again` still holds it.
  images.release(*again);
  EXPECT_EQ(images.collect({keys[0]}), 1);
  EXPECT_TRUE(fs::exists(img->layer_dirs[0]));
  EXPECT_FALSE(fs::exists(img->layer_dirs[1]));
}

// The cache's cap: layers in use stay whatever their size; idle ones go least recently used
// first while the cache is over the cap, and all of them once unused for keep_unused.
TEST_F(OciImageTest, TrimKeepsLayersInUseAndEvictsTheLeastRecentlyUsedPastTheCap) {
  ImageCache images(cache().string());
  const auto now = fs::file_time_type::clock::now();
  const std::string names[] = {std::string(64, 'a'), std::string(64, 'b'), std::string(64, 'c'),
                               std::string(64, 'd')};
  for (int i = 0; i < 4; ++i) {
    const fs::path l = cache() / "layers" / names[i];
    fs::create_directories(l);
    std::ofstream(l / "data") << std::string(100 * 1024, 'x');
    // a: used an hour ago (in use now); b: 3 minutes ago; c: 2; d: 1.
    fs::last_write_time(l, now - std::chrono::minutes(i == 0 ? 60 : 4 - i));
  }
  fs::create_directories(cache() / "layers" / (names[0] + ".partial"));
  const int64_t all = images.bytes();
  EXPECT_GE(all, 4 * 100 * 1024);
  // Room for three of them: b, the least recently used idle one, goes.
  EXPECT_EQ(images.trim({names[0]}, std::chrono::hours(1), all * 3 / 4 + 1), 2);  // b, .partial
  EXPECT_TRUE(fs::exists(cache() / "layers" / names[0]));
  EXPECT_FALSE(fs::exists(cache() / "layers" / names[1]));
  EXPECT_TRUE(fs::exists(cache() / "layers" / names[2]));
  EXPECT_TRUE(fs::exists(cache() / "layers" / names[3]));
  EXPECT_FALSE(fs::exists(cache() / "sizes" / names[1]));
  // No cap, but a short keep_unused: idle layers go, the one in use stays.
  EXPECT_EQ(images.trim({names[0]}, std::chrono::seconds(30), 0), 2);
  EXPECT_TRUE(fs::exists(cache() / "layers" / names[0]));
  EXPECT_FALSE(fs::exists(cache() / "layers" / names[2]));
  // A cap below the layer in use does not take it.
  EXPECT_EQ(images.trim({names[0]}, std::chrono::hours(1), 1), 0);
  EXPECT_TRUE(fs::exists(cache() / "layers" / names[0]));
}

TEST_F(OciImageTest, ALayerThatIsNotWhatItsDigestSaysIsRefusedAndNotCached) {
  const std::vector<std::string> keys = writeImage({makeTar({{"f", "good"}}, true)});
  std::ofstream(dir_ / "layout" / "blobs" / "sha256" / keys[0], std::ios::binary)
      << makeTar({{"f", "evil"}}, true);
  ImageCache images(cache().string());
  auto img = images.get(layout());
  ASSERT_FALSE(img.isOk());
  EXPECT_NE(img.status().message().find("does not match its digest"), std::string::npos)
      << img.status().message();
  EXPECT_TRUE(fs::is_empty(cache() / "layers"));
}

TEST_F(OciImageTest, EntriesOutsideTheLayerAreRefused) {
  writeImage({makeTar({{"ok", "1"}, {"../../escaped", "x"}}, true)});
  ImageCache images(cache().string());
  auto img = images.get(layout());
  ASSERT_FALSE(img.isOk());
  EXPECT_NE(img.status().message().find("points outside the layer"), std::string::npos)
      << img.status().message();
  EXPECT_FALSE(fs::exists(dir_ / "escaped"));
  EXPECT_FALSE(fs::exists(cache() / "escaped"));
  EXPECT_TRUE(fs::is_empty(cache() / "layers"));
}

// A layer's own link must not take its whiteouts (which remove what they name) out of it.
TEST_F(OciImageTest, WhiteoutsThroughALinkAreRefused) {
  fs::create_directories(dir_ / "outside");
  std::ofstream(dir_ / "outside" / "victim") << "keep me";
  writeImage({makeTar({{"a", (dir_ / "outside").string(), 'l'}, {"a/.wh.victim", ""}}, true)});
  ImageCache images(cache().string());
  auto img = images.get(layout());
  ASSERT_FALSE(img.isOk());
  EXPECT_NE(img.status().message().find("goes through a link"), std::string::npos)
      << img.status().message();
  EXPECT_TRUE(fs::is_regular_file(dir_ / "outside" / "victim"));
  EXPECT_TRUE(fs::is_empty(cache() / "layers"));
}

TEST_F(OciImageTest, ArchivesTagsAndRegistriesSayWhatIsWrong) {
  writeImage({makeTar({{"f", "1"}}, true)}, "v1");
  ImageCache images(cache().string());
  auto tagged = images.get(layout("v2"));
  ASSERT_FALSE(tagged.isOk());
  EXPECT_NE(tagged.status().message().find("no image tagged 'v2'"), std::string::npos);
  // A registry nobody answers at (a closed loopback port).
  auto registry = images.get(*model::parseImageRef("127.0.0.1:1/x/y:1"));
  ASSERT_FALSE(registry.isOk());
  EXPECT_EQ(registry.status().code(), core::StatusCode::kUnavailable);
  EXPECT_NE(registry.status().message().find(
                "image 127.0.0.1:1/x/y:1: cannot reach the registry at https://127.0.0.1:1"),
            std::string::npos)
      << registry.status().message();
  auto missing = images.get({model::ImageRef::Kind::kOciArchive, "/no/such.tar", "", ""});
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("no such file"), std::string::npos);
  // The layout as a tar: the same image.
  const std::string tar = (dir_ / "image.tar").string();
  ASSERT_EQ(std::system(("tar -C " + (dir_ / "layout").string() + " -cf " + tar + " .").c_str()),
            0);
  auto archived = images.get({model::ImageRef::Kind::kOciArchive, tar, "", ""});
  ASSERT_TRUE(archived.isOk()) << archived.status().toString();
  EXPECT_TRUE(fs::exists(archived->layer_dirs[0] + "/f"));
  std::ofstream(dir_ / "junk.tar") << "not a tar at all";
  auto junk =
      images.get({model::ImageRef::Kind::kOciArchive, (dir_ / "junk.tar").string(), "", ""});
  ASSERT_FALSE(junk.isOk());
  EXPECT_NE(junk.status().message().find("junk.tar"), std::string::npos);
}

// The bundle a container task gets: its GPUs from a CDI spec when one names them (here /dev/null
// standing in for a GPU's node), else its own device nodes and stand-ins; everything gone after
// cleanup.
// CDI specs as nvidia-ctk writes them in YAML, with hooks; the run-time folder's spec wins for a
// device both name; a spec others may write is not read; a hook of no known kind is an error.
TEST_F(OciImageTest, CdiSpecsInYamlWithHooksFromBothFolders) {
  fs::create_directories(dir_ / "etc-cdi");
  fs::create_directories(dir_ / "run-cdi");
  std::ofstream(dir_ / "etc-cdi" / "nvidia.yaml") << R"(---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: GPU-1
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
      hostPath: /dev/null
- name: GPU-2
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia2
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
    timeout: 5
  mounts:
  - hostPath: /etc/hostname
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.1
    options: [ro, nosuid, nodev, bind]
)";
  std::ofstream(dir_ / "run-cdi" / "late.json")
      << json{{"cdiVersion", "0.6.0"},
              {"kind", "nvidia.com/gpu"},
              {"devices",
               {{{"name", "GPU-2"},
                 {"containerEdits",
                  {{"deviceNodes", {{{"path", "/dev/nvidia2"}, {"hostPath", "/dev/zero"}}}}}}}}}}
             .dump();
  std::vector<std::string> problems;
  const CdiDevices cdi =
      readCdi({(dir_ / "etc-cdi").string(), (dir_ / "run-cdi").string()}, &problems);
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems);
  ASSERT_EQ(cdi.devices.size(), 2U);
  EXPECT_EQ(cdi.devices.at("GPU-2")["edits"]["deviceNodes"][0]["hostPath"], "/dev/zero");
  json config = {
      {"mounts", json::array()},
      {"linux", {{"devices", json::array()}, {"resources", {{"devices", json::array()}}}}}};
  std::vector<std::string> env;
  std::set<std::string> done;
  for (const char* gpu : {"GPU-1", "GPU-2"}) {
    ASSERT_TRUE(applyCdiEdits(cdi.devices.at(gpu)["common"], config, env, done).isOk());
    ASSERT_TRUE(applyCdiEdits(cdi.devices.at(gpu)["edits"], config, env, done).isOk());
  }
  // The spec's common edits once, each device's node with its rule.
  ASSERT_EQ(config["hooks"]["createContainer"].size(), 1U) << config.dump();
  const json& hook = config["hooks"]["createContainer"][0];
  EXPECT_EQ(hook["path"], "/usr/bin/nvidia-cdi-hook");
  EXPECT_EQ(hook["args"][1], "update-ldcache");
  EXPECT_EQ(hook["timeout"], 5);
  EXPECT_EQ(config["mounts"].size(), 1U);
  EXPECT_EQ(config["mounts"][0]["options"][0], "ro");
  ASSERT_EQ(config["linux"]["devices"].size(), 2U);
  EXPECT_EQ(config["linux"]["devices"][1]["minor"], 5);  // /dev/zero (1, 5).
  EXPECT_EQ(env, std::vector<std::string>{"NVIDIA_VISIBLE_DEVICES=void"});
  // A hook of no kind the runtime knows is refused, naming it.
  const json bad = {{"hooks", {{{"hookName", "whenever"}, {"path", "/bin/true"}}}}};
  const core::Status st = applyCdiEdits(bad, config, env, done);
  EXPECT_EQ(st.message(), "CDI: hook '/bin/true' has an unknown hookName 'whenever'");
  // A spec anyone may write (its hooks run as root) and one that is not YAML are skipped, saying
  // why.
  std::ofstream(dir_ / "run-cdi" / "broken.yaml") << "kind: [unclosed";
  fs::permissions(dir_ / "run-cdi" / "late.json", fs::perms::others_write, fs::perm_options::add);
  problems.clear();
  const CdiDevices fewer =
      readCdi({(dir_ / "etc-cdi").string(), (dir_ / "run-cdi").string()}, &problems);
  EXPECT_EQ(problems.size(), ::geteuid() == 0 ? 2U : 1U) << ::testing::PrintToString(problems);
  if (::geteuid() == 0) {
    EXPECT_FALSE(fewer.devices.at("GPU-2")["edits"]["deviceNodes"][0].contains("hostPath"));
  }
}

TEST_F(OciImageTest, ContainerBundlesTakeGpusFromCdiOrTheTasksOwnNodes) {
  if (::geteuid() != 0 || std::system("command -v runc >/dev/null") != 0) {
    GTEST_SKIP() << "needs root (an overlay mount) and runc";
  }
  writeImage({makeTar({{"bin", "", 'd'}, {"bin/sh", "#!"}}, true)});
  fs::create_directories(dir_ / "cdi");
  std::ofstream(dir_ / "cdi" / "nvidia.json") << json{
      {"cdiVersion", "0.5.0"},
      {"kind", "nvidia.com/gpu"},
      {"devices",
       {{{"name", "GPU-1"},
         {"containerEdits",
          {{"deviceNodes", {{{"path", "/dev/nvidia1"}, {"hostPath", "/dev/null"}}}}}}},
        {{"name", "GPU-2"},
         {"containerEdits",
          {{"deviceNodes", {{{"path", "/dev/nvidia2"}, {"hostPath", "/dev/zero"}}}}}}}}},
      {"containerEdits",
       {{"env", {"NVIDIA_VISIBLE_DEVICES=void", "CUDA_VISIBLE_DEVICES=all"}},
        {"mounts",
         {{{"hostPath", "/etc/hostname"},
           {"containerPath", "/usr/lib/libcuda.so.1"},
           {"options", {"ro", "bind"}}}}}}}}.dump();
  Containers c({.dir = (dir_ / "containers").string(), .cdi_dir = (dir_ / "cdi").string()});
  TaskSpec spec;
  spec.id = "team-1.train.0";
  spec.container.image = "oci:" + (dir_ / "layout").string();
  spec.gpus.mode = GpuPinning::Mode::kWhole;
  spec.gpus.uuids = {"GPU-1"};
  spec.command = {"sh", "-c", "true"};
  auto argv = c.prepare(spec, {"CUDA_VISIBLE_DEVICES=GPU-1", "PATH=/host/bin"}, 1234, 1234);
  ASSERT_TRUE(argv.isOk()) << argv.status().toString();
  const fs::path bundle = dir_ / "containers" / "bundles" / spec.id;
  EXPECT_EQ(argv->back(), spec.id);
  EXPECT_NE(std::find(argv->begin(), argv->end(), bundle.string()), argv->end());
  std::ifstream in(bundle / "config.json");
  json config = json::parse(in);
  // Only GPU-1's node (from the CDI spec), as a device entry with its rule.
  ASSERT_EQ(config["linux"]["devices"].size(), 1U) << config["linux"].dump();
  EXPECT_EQ(config["linux"]["devices"][0]["path"], "/dev/nvidia1");
  EXPECT_EQ(config["linux"]["devices"][0]["major"], 1);
  EXPECT_EQ(config["linux"]["devices"][0]["minor"], 3);
  EXPECT_EQ(config["process"]["user"]["uid"], 1234);
  const json env = config["process"]["env"];
  auto has = [&](const std::string& kv) {
    return std::find(env.begin(), env.end(), kv) != env.end();
  };
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=GPU-1")) << env.dump();  // The agent's pinning wins.
  EXPECT_TRUE(has("NVIDIA_VISIBLE_DEVICES=void")) << env.dump();
  EXPECT_TRUE(has("PATH=/bin")) << env.dump();  // The image's, not the node's.
  EXPECT_NE(config["mounts"].dump().find("/usr/lib/libcuda.so.1"), std::string::npos);
  EXPECT_TRUE(fs::exists(bundle / "rootfs" / "bin" / "sh"));  // The overlay is mounted.
  c.cleanup(spec.id);
  EXPECT_FALSE(fs::exists(bundle));

  // No CDI spec for GPU-9: the task's own node, and stand-ins for simulated GPUs.
  spec.gpus.uuids = {"GPU-9"};
  spec.device_nodes = {"/dev/zero"};
  spec.container.simulated_devices = {{"/dev/nvidia0", "GPU-9"}};
  argv = c.prepare(spec, {}, 1234, 1234);
  ASSERT_TRUE(argv.isOk()) << argv.status().toString();
  config = json::parse(std::ifstream(bundle / "config.json"));
  ASSERT_EQ(config["linux"]["devices"].size(), 1U);
  EXPECT_EQ(config["linux"]["devices"][0]["path"], "/dev/zero");
  EXPECT_NE(config["mounts"].dump().find("\"destination\":\"/dev/nvidia0\""), std::string::npos)
      << config["mounts"].dump();
  c.cleanup(spec.id);
  EXPECT_FALSE(fs::exists(bundle));
  // A device node that is not one: a clear error, nothing left behind.
  spec.container.simulated_devices.clear();
  spec.device_nodes = {(dir_ / "layout" / "index.json").string()};
  argv = c.prepare(spec, {}, 1234, 1234);
  ASSERT_FALSE(argv.isOk());
  EXPECT_NE(argv.status().message().find("is not a device"), std::string::npos);
  EXPECT_FALSE(fs::exists(bundle));

  // In a user namespace: root inside is uid 1234 outside, alone; the node's /sys is bound (it
  // cannot be mounted anew there); the bundle is root's, entered by the task's group only.
  Containers userns({.dir = (dir_ / "containers").string(),
                     .cdi_dir = (dir_ / "cdi").string(),
                     .user_namespace = true});
  spec.device_nodes.clear();
  argv = userns.prepare(spec, {}, 1234, 4321);
  ASSERT_TRUE(argv.isOk()) << argv.status().toString();
  config = json::parse(std::ifstream(bundle / "config.json"));
  EXPECT_EQ(config["process"]["user"]["uid"], 0);
  EXPECT_EQ(config["process"]["user"]["gid"], 0);
  EXPECT_EQ(config["linux"]["uidMappings"],
            json::parse(R"([{"containerID": 0, "hostID": 1234, "size": 1}])"));
  EXPECT_EQ(config["linux"]["gidMappings"],
            json::parse(R"([{"containerID": 0, "hostID": 4321, "size": 1}])"));
  EXPECT_NE(config["linux"]["namespaces"].dump().find("\"user\""), std::string::npos);
  EXPECT_NE(
      config["mounts"].dump().find(
          R"({"destination":"/sys","options":["rbind","nosuid","noexec","nodev","ro"],"source":"/sys","type":"bind"})"),
      std::string::npos)
      << config["mounts"].dump();
  struct stat st {};
  ASSERT_EQ(::stat(bundle.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0U);
  EXPECT_EQ(st.st_gid, 4321U);
  EXPECT_EQ(st.st_mode & 0777, 0710U);
  userns.cleanup(spec.id);
}

}  // namespace
}  // namespace tessera::agent
