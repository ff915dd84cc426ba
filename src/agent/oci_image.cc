#include "agent/oci_image.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

namespace tessera::agent {

// Where an image's files come from: a layout folder, a tar of one, or a registry.
class ImageSource {
 public:
  virtual ~ImageSource() = default;
  // A small file of the layout ("index.json", "blobs/sha256/<hex>"); nullopt if absent.
  virtual std::optional<std::string> small(const std::string& name) = 0;
  // Calls `consume` with the blob's bytes, in order; false if the blob is absent.
  virtual core::Result<bool> stream(
      const std::string& name, const std::function<core::Status(const void*, size_t)>& consume) = 0;
  // Whether a stream that failed as unavailable may succeed if tried again (a network's).
  virtual bool retriable() const { return false; }
};

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Manifests, indexes and configs are small; anything bigger named as one is refused.
constexpr size_t kMaxJsonBlob = size_t{16} << 20;
// Tries of a layer whose download broke off.
constexpr int kLayerTries = 3;

// The hex part of "sha256:<64 hex>"; an error for any other digest.
core::Result<std::string> digestHex(const json& descriptor, const std::string& where) {
  if (!descriptor.is_object() || !descriptor.contains("digest") ||
      !descriptor["digest"].is_string()) {
    return core::invalidArgument(where + ": a descriptor without a digest");
  }
  const std::string d = descriptor["digest"].get<std::string>();
  const std::string hex = d.starts_with("sha256:") ? d.substr(7) : "";
  const bool ok =
      hex.size() == 64 && hex.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!ok) {
    return core::invalidArgument(where + ": unsupported digest '" + d.substr(0, 80) +
                                 "' (expected sha256:<64 lower-case hex digits>)");
  }
  return hex;
}

class LayoutSource : public ImageSource {
 public:
  explicit LayoutSource(std::string dir) : dir_(std::move(dir)) {}
  std::optional<std::string> small(const std::string& name) override {
    std::ifstream in(dir_ + "/" + name, std::ios::binary);
    if (!in) {
      return std::nullopt;
    }
    std::string s;
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
      s.append(buf, static_cast<size_t>(in.gcount()));
      if (s.size() > kMaxJsonBlob) {
        return std::nullopt;
      }
    }
    return s;
  }
  core::Result<bool> stream(
      const std::string& name,
      const std::function<core::Status(const void*, size_t)>& consume) override {
    const int fd = ::open((dir_ + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return false;
    }
    std::vector<char> buf(size_t{1} << 20);
    core::Status st;
    while (st.isOk()) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0) {
        st = core::unavailable("cannot read " + dir_ + "/" + name + ": " + std::strerror(errno));
      }
      if (n <= 0) {
        break;
      }
      st = consume(buf.data(), static_cast<size_t>(n));
    }
    ::close(fd);
    if (!st.isOk()) {
      return st;
    }
    return true;
  }

 private:
  std::string dir_;
};

std::string cleanName(std::string name) {
  while (name.starts_with("./")) {
    name = name.substr(2);
  }
  while (name.starts_with("/")) {
    name = name.substr(1);
  }
  return name;
}

// A tar of a layout: read through once per blob that is streamed, small files kept from the
// first pass.
class ArchiveSource : public ImageSource {
 public:
  static core::Result<std::unique_ptr<ArchiveSource>> open(const std::string& path) {
    auto src = std::unique_ptr<ArchiveSource>(new ArchiveSource(path));
    TESSERA_RETURN_IF_ERROR(
        src->scan([&](archive* a, archive_entry* e, const std::string& name) -> core::Result<bool> {
          if (archive_entry_size(e) > static_cast<la_int64_t>(kMaxJsonBlob)) {
            return false;
          }
          if (name != "index.json" && !name.starts_with("blobs/")) {
            return false;
          }
          std::string content(static_cast<size_t>(archive_entry_size(e)), '\0');
          if (!content.empty() && archive_read_data(a, content.data(), content.size()) !=
                                      static_cast<la_ssize_t>(content.size())) {
            return core::invalidArgument(path + ": cannot read " + name + ": " +
                                         archive_error_string(a));
          }
          src->small_[name] = std::move(content);
          return false;
        }));
    return src;
  }
  std::optional<std::string> small(const std::string& name) override {
    auto it = small_.find(name);
    return it == small_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  core::Result<bool> stream(
      const std::string& name,
      const std::function<core::Status(const void*, size_t)>& consume) override {
    bool found = false;
    TESSERA_RETURN_IF_ERROR(
        scan([&](archive* a, archive_entry*, const std::string& entry) -> core::Result<bool> {
          if (entry != name) {
            return false;
          }
          found = true;
          std::vector<char> buf(size_t{1} << 20);
          while (true) {
            const la_ssize_t n = archive_read_data(a, buf.data(), buf.size());
            if (n < 0) {
              return core::invalidArgument(path_ + ": cannot read " + name + ": " +
                                           archive_error_string(a));
            }
            if (n == 0) {
              return true;
            }
            TESSERA_RETURN_IF_ERROR(consume(buf.data(), static_cast<size_t>(n)));
          }
        }));
    return found;
  }

 private:
  explicit ArchiveSource(std::string path) : path_(std::move(path)) {}

  // Calls `each` for every regular file until it returns true.
  core::Status scan(
      const std::function<core::Result<bool>(archive*, archive_entry*, const std::string&)>& each) {
    std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), archive_read_free);
    archive_read_support_format_tar(a.get());
    archive_read_support_filter_all(a.get());
    if (archive_read_open_filename(a.get(), path_.c_str(), 1 << 20) != ARCHIVE_OK) {
      return core::notFound("cannot open image archive " + path_ + ": " +
                            archive_error_string(a.get()));
    }
    archive_entry* e = nullptr;
    while (true) {
      const int r = archive_read_next_header(a.get(), &e);
      if (r == ARCHIVE_EOF) {
        return core::Status::ok();
      }
      if (r < ARCHIVE_WARN) {
        return core::invalidArgument(path_ +
                                     ": not a readable tar: " + archive_error_string(a.get()));
      }
      if (archive_entry_filetype(e) != AE_IFREG) {
        continue;
      }
      TESSERA_ASSIGN_OR_RETURN(const bool done,
                               each(a.get(), e, cleanName(archive_entry_pathname(e))));
      if (done) {
        return core::Status::ok();
      }
    }
  }

  std::string path_;
  std::map<std::string, std::string> small_;
};

// A registry's blobs ("blobs/sha256/<hex>"), through one pull's session; what it streams counts
// towards the pull's progress.
class RegistrySource : public ImageSource {
 public:
  RegistrySource(RegistrySession& session, const PullOptions& pull, int64_t total)
      : session_(session), pull_(pull), total_(total) {}
  std::optional<std::string> small(const std::string& name) override {
    std::string out;
    const core::Status st = session_.blob(digestOf(name), [&](const void* p, size_t n) {
      if (out.size() + n > kMaxJsonBlob) {
        return core::failedPrecondition("over 16 MiB");
      }
      out.append(static_cast<const char*>(p), n);
      return core::Status::ok();
    });
    if (!st.isOk()) {
      error_ = st;
      return std::nullopt;
    }
    return out;
  }
  core::Result<bool> stream(
      const std::string& name,
      const std::function<core::Status(const void*, size_t)>& consume) override {
    int64_t streamed = 0;
    const core::Status st =
        session_.blob(digestOf(name), [&](const void* p, size_t n) -> core::Status {
          if (pull_.cancel != nullptr && pull_.cancel->load()) {
            return core::unavailable(session_.where() + ": the pull was stopped (agent stopping)");
          }
          streamed += static_cast<int64_t>(n);
          done_ += static_cast<int64_t>(n);
          if (pull_.progress) {
            pull_.progress(done_, std::max(done_, total_));
          }
          return consume(p, n);
        });
    if (!st.isOk()) {
      done_ -= streamed;  // Tried again from its start, if at all.
      return st;
    }
    return true;
  }
  bool retriable() const override {
    return pull_.cancel == nullptr || !pull_.cancel->load();  // Not once the agent stops.
  }
  // Why the last small() failed.
  const core::Status& error() const { return error_; }

 private:
  static std::string digestOf(const std::string& name) {
    return "sha256:" + name.substr(name.rfind('/') + 1);
  }
  RegistrySession& session_;
  const PullOptions& pull_;
  int64_t total_;
  int64_t done_ = 0;
  core::Status error_;
};

// A JSON blob, verified against its digest.
core::Result<json> jsonBlob(ImageSource& src, const std::string& hex, const std::string& where) {
  const std::optional<std::string> content = src.small("blobs/sha256/" + hex);
  if (!content) {
    return core::notFound(where + ": blob sha256:" + hex + " is missing (or over 16 MiB)");
  }
  Sha256 h;
  h.update(content->data(), content->size());
  if (h.hex() != hex) {
    return core::invalidArgument(where + ": blob sha256:" + hex + " does not match its digest");
  }
  json j = json::parse(*content, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return core::invalidArgument(where + ": blob sha256:" + hex + " is not a JSON object");
  }
  return j;
}

constexpr const char* kIndexType = "application/vnd.oci.image.index.v1+json";
constexpr const char* kDockerListType = "application/vnd.docker.distribution.manifest.list.v2+json";

std::string mediaType(const json& j) {
  return j.contains("mediaType") && j["mediaType"].is_string() ? j["mediaType"].get<std::string>()
                                                               : "";
}

// An index's linux/amd64 image descriptor (or its only one); nullopt if none.
std::optional<json> linuxAmd64(const json& index) {
  if (!index.is_object() || !index.contains("manifests") || !index["manifests"].is_array()) {
    return std::nullopt;
  }
  const json& list = index["manifests"];
  for (const json& d : list) {
    const json* p = d.is_object() && d.contains("platform") ? &d["platform"] : nullptr;
    if (p != nullptr && p->is_object() && p->value("os", "") == "linux" &&
        p->value("architecture", "") == "amd64") {
      return d;
    }
  }
  return list.size() == 1 ? std::optional<json>(list[0]) : std::nullopt;
}

// The manifest descriptor to run from an index's "manifests": by tag, else the only one; an
// index nested in it is followed to its linux/amd64 image (or its only one).
core::Result<json> chooseManifest(ImageSource& src, const json& index, const std::string& tag,
                                  const std::string& where, int depth) {
  if (!index.contains("manifests") || !index["manifests"].is_array() ||
      index["manifests"].empty()) {
    return core::invalidArgument(where + ": its index lists no manifests");
  }
  const json& list = index["manifests"];
  std::optional<json> chosen;
  if (!tag.empty()) {
    for (const json& d : list) {
      const json* ann = d.contains("annotations") ? &d["annotations"] : nullptr;
      if (ann != nullptr && ann->is_object() &&
          ann->contains("org.opencontainers.image.ref.name") &&
          (*ann)["org.opencontainers.image.ref.name"] == tag) {
        chosen = d;
        break;
      }
    }
    if (!chosen) {
      return core::notFound(where + ": no image tagged '" + tag + "' in its index.json");
    }
  } else if (depth > 0) {
    chosen = linuxAmd64(index);
    if (!chosen) {
      return core::notFound(where + ": no linux/amd64 image in its index");
    }
  } else if (list.size() == 1) {
    chosen = list[0];
  } else {
    return core::invalidArgument(where + ": its index.json holds " + std::to_string(list.size()) +
                                 " images; name one with oci:/path:TAG");
  }
  const std::string type = mediaType(*chosen);
  if (type == kIndexType || type == kDockerListType) {
    if (depth >= 2) {
      return core::invalidArgument(where + ": indexes nested too deep");
    }
    TESSERA_ASSIGN_OR_RETURN(const std::string hex, digestHex(*chosen, where));
    TESSERA_ASSIGN_OR_RETURN(const json nested, jsonBlob(src, hex, where));
    return chooseManifest(src, nested, "", where, depth + 1);
  }
  return *chosen;
}

std::vector<std::string> stringList(const json& j, const char* key) {
  std::vector<std::string> out;
  if (j.is_object() && j.contains(key) && j[key].is_array()) {
    for (const json& s : j[key]) {
      if (s.is_string()) {
        out.push_back(s.get<std::string>());
      }
    }
  }
  return out;
}

// Whether a layer entry's path stays inside the layer: no "..", nothing absolute after cleaning.
bool insideLayer(const std::string& name) {
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) {
      end = name.size();
    }
    if (name.compare(start, end - start, "..") == 0 && end - start == 2) {
      return false;
    }
    start = end + 1;
  }
  return true;
}

// Whether every folder on the way from `dest` to `dest`/`rel` (rel's last part excluded) is a
// real folder, never a link: a layer's own link ("etc -> /etc") must not take a whiteout or a
// hard link out of the layer. With `create`, missing folders are made.
bool noLinkOnTheWay(const std::string& dest, const std::string& rel, bool create) {
  std::string at = dest;
  size_t start = 0;
  while (true) {
    const size_t slash = rel.find('/', start);
    if (slash == std::string::npos) {
      return true;
    }
    at.push_back('/');
    at.append(rel, start, slash - start);
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0) {
      if (!create || ::mkdir(at.c_str(), 0755) != 0) {
        return false;
      }
    } else if (!S_ISDIR(st.st_mode)) {
      return false;
    }
    start = slash + 1;
  }
}

// Unpacks one layer (a tar, compressed or not) from `src` into `dest`, which must not exist, and
// checks its bytes against `hex`.
core::Status unpackLayer(ImageSource& src, const std::string& hex, const std::string& dest,
                         const std::string& where) {
  std::error_code ec;
  fs::create_directories(dest, ec);
  if (ec) {
    return core::unavailable(where + ": cannot create " + dest + ": " + ec.message());
  }
  ::chmod(dest.c_str(), 0755);  // The layer's root is the container's "/".
  // The blob is copied next to the layer first, hashed on the way, and unpacked only once its
  // digest matched: nothing of a blob that is not what its name says is ever written out.
  Sha256 h;
  const std::string name = "blobs/sha256/" + hex;
  const std::string tmp_blob = dest + ".blob";
  {
    const int fd = ::open(tmp_blob.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      return core::unavailable(where + ": cannot write " + tmp_blob + ": " + std::strerror(errno));
    }
    auto found = src.stream(name, [&](const void* data, size_t n) -> core::Status {
      h.update(data, n);
      if (::write(fd, data, n) != static_cast<ssize_t>(n)) {
        return core::unavailable(where + ": cannot write " + tmp_blob + ": " +
                                 std::strerror(errno));
      }
      return core::Status::ok();
    });
    ::close(fd);
    if (!found.isOk() || !*found) {
      ::unlink(tmp_blob.c_str());
      return found.isOk() ? core::notFound(where + ": layer sha256:" + hex + " is missing")
                          : found.status();
    }
  }
  if (h.hex() != hex) {
    ::unlink(tmp_blob.c_str());
    return core::invalidArgument(where + ": layer sha256:" + hex + " does not match its digest");
  }
  std::unique_ptr<archive, int (*)(archive*)> in(archive_read_new(), archive_read_free);
  archive_read_support_format_tar(in.get());
  archive_read_support_filter_all(in.get());
  std::unique_ptr<archive, int (*)(archive*)> out(archive_write_disk_new(), archive_write_free);
  archive_write_disk_set_options(out.get(), ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
                                                ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_XATTR |
                                                ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                                ARCHIVE_EXTRACT_SECURE_SYMLINKS);
  archive_write_disk_set_standard_lookup(out.get());
  core::Status st;
  if (archive_read_open_filename(in.get(), tmp_blob.c_str(), 1 << 20) != ARCHIVE_OK) {
    st = core::invalidArgument(where + ": layer sha256:" + hex + ": " +
                               archive_error_string(in.get()));
  }
  archive_entry* e = nullptr;
  while (st.isOk()) {
    const int r = archive_read_next_header(in.get(), &e);
    if (r == ARCHIVE_EOF) {
      break;
    }
    if (r < ARCHIVE_WARN) {
      st = core::invalidArgument(where + ": layer sha256:" + hex +
                                 " is not a readable tar: " + archive_error_string(in.get()));
      break;
    }
    const std::string entry = cleanName(archive_entry_pathname(e));
    if (entry.empty()) {
      continue;  // "./" itself.
    }
    if (!insideLayer(entry)) {
      st = core::invalidArgument(where + ": layer sha256:" + hex + ": entry '" +
                                 entry.substr(0, 200) + "' points outside the layer");
      break;
    }
    const size_t slash = entry.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : entry.substr(0, slash);
    const std::string base = slash == std::string::npos ? entry : entry.substr(slash + 1);
    if (base.starts_with(".wh.")) {
      // Whiteouts, in the form overlayfs reads in a lower layer.
      const std::string pdir = parent.empty() ? dest : dest + "/" + parent;
      if (!noLinkOnTheWay(dest, entry, true)) {
        st = core::invalidArgument(where + ": layer sha256:" + hex + ": whiteout '" +
                                   entry.substr(0, 200) + "' goes through a link");
        break;
      }
      if (base == ".wh..wh..opq") {
        if (::setxattr(pdir.c_str(), "trusted.overlay.opaque", "y", 1, 0) != 0) {
          st = core::unavailable(where + ": cannot mark " + pdir +
                                 " opaque: " + std::strerror(errno));
        }
      } else {
        const std::string target = pdir + "/" + base.substr(4);
        fs::remove_all(target, ec);
        if (::mknod(target.c_str(), S_IFCHR | 0, ::makedev(0, 0)) != 0) {
          st = core::unavailable(where + ": cannot make the whiteout " + target + ": " +
                                 std::strerror(errno));
        }
      }
      continue;
    }
    archive_entry_set_pathname(e, (dest + "/" + entry).c_str());
    if (const char* link = archive_entry_hardlink(e); link != nullptr) {
      const std::string target = cleanName(link);
      if (!insideLayer(target) || !noLinkOnTheWay(dest, target, false)) {
        st = core::invalidArgument(where + ": layer sha256:" + hex + ": hard link '" +
                                   entry.substr(0, 200) + "' points outside the layer");
        break;
      }
      archive_entry_set_hardlink(e, (dest + "/" + target).c_str());
    }
    if (archive_write_header(out.get(), e) < ARCHIVE_WARN) {
      st = core::invalidArgument(where + ": layer sha256:" + hex + ": cannot unpack '" +
                                 entry.substr(0, 200) + "': " + archive_error_string(out.get()));
      break;
    }
    const void* buf = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    while (true) {
      const int dr = archive_read_data_block(in.get(), &buf, &size, &offset);
      if (dr == ARCHIVE_EOF) {
        break;
      }
      if (dr < ARCHIVE_WARN ||
          archive_write_data_block(out.get(), buf, size, offset) < ARCHIVE_WARN) {
        st = core::invalidArgument(where + ": layer sha256:" + hex + ": cannot unpack '" +
                                   entry.substr(0, 200) + "'");
        break;
      }
    }
    if (st.isOk() && archive_write_finish_entry(out.get()) < ARCHIVE_WARN) {
      st = core::invalidArgument(where + ": layer sha256:" + hex + ": cannot unpack '" +
                                 entry.substr(0, 200) + "': " + archive_error_string(out.get()));
    }
  }
  archive_write_close(out.get());
  ::unlink(tmp_blob.c_str());
  return st;
}

// Bytes under `path` on disk (its files' blocks).
int64_t diskBytes(const std::string& path) {
  int64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0) {
      total += static_cast<int64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

// The image a manifest describes, its layers unpacked into `dir`/layers where not there yet
// (and their sizes noted in `dir`/sizes).
// Who may unpack a layer: `claim` waits while another call unpacks it, pins it, and returns
// whether this call must unpack it (it is not there); `unpacked` ends a claim that returned true.
struct LayerGate {
  std::function<bool(const std::string& hex, const std::string& dest)> claim;
  std::function<void(const std::string& hex)> unpacked;
};

core::Result<UnpackedImage> unpackImage(const std::string& dir, ImageSource& src,
                                        const json& manifest, const std::string& manifest_hex,
                                        const std::string& where, const LayerGate& gate) {
  if (!manifest.contains("layers") || !manifest["layers"].is_array() ||
      !manifest.contains("config")) {
    return core::invalidArgument(where + ": manifest sha256:" + manifest_hex +
                                 " has no layers or config");
  }
  UnpackedImage img;
  img.manifest_digest = "sha256:" + manifest_hex;
  TESSERA_ASSIGN_OR_RETURN(const std::string config_hex, digestHex(manifest["config"], where));
  TESSERA_ASSIGN_OR_RETURN(const json config, jsonBlob(src, config_hex, where));
  if (config.contains("config") && config["config"].is_object()) {
    const json& c = config["config"];
    img.config.env = stringList(c, "Env");
    img.config.entrypoint = stringList(c, "Entrypoint");
    img.config.cmd = stringList(c, "Cmd");
    if (c.contains("WorkingDir") && c["WorkingDir"].is_string()) {
      img.config.working_dir = c["WorkingDir"].get<std::string>();
    }
  }
  const std::string layers = dir + "/layers";
  std::error_code ec;
  fs::create_directories(layers, ec);
  if (ec) {
    return core::unavailable(where + ": cannot create " + layers + ": " + ec.message());
  }
  ::chmod(dir.c_str(), 0700);  // Images may hold what their owners keep from other tenants.
  // SECURE_SYMLINKS refuses a path through any link, the cache's own included.
  const std::string real_layers = fs::canonical(layers, ec).string();
  if (ec) {
    return core::unavailable(where + ": " + layers + ": " + ec.message());
  }
  for (const json& layer : manifest["layers"]) {
    TESSERA_ASSIGN_OR_RETURN(const std::string hex, digestHex(layer, where));
    const std::string dest = real_layers + "/" + hex;
    img.layer_dirs.push_back(dest);
    img.layer_keys.push_back(hex);  // Pinned from here (the caller releases it).
    if (gate.claim(hex, dest)) {
      const std::string partial = dest + ".partial";
      fs::remove_all(partial, ec);
      // A download that broke off (a registry's connection reset, a 5xx) is tried again from
      // its start, up to kLayerTries times, 1 s and then 2 s apart, as Docker's pulls do.
      core::Status st;
      for (int attempt = 1;; ++attempt) {
        st = unpackLayer(src, hex, partial, where);
        if (st.isOk() || st.code() != core::StatusCode::kUnavailable || attempt == kLayerTries ||
            !src.retriable()) {
          if (!st.isOk() && attempt > 1) {
            st = core::Status(st.code(),
                              st.message() + " (after " + std::to_string(attempt) + " tries)");
          }
          break;
        }
        fs::remove_all(partial, ec);
        std::this_thread::sleep_for(std::chrono::seconds(attempt));
      }
      if (st.isOk() && ::rename(partial.c_str(), dest.c_str()) != 0) {
        st = core::unavailable(where + ": cannot rename " + partial + ": " + std::strerror(errno));
      }
      if (st.isOk()) {
        fs::create_directories(dir + "/sizes", ec);
        std::ofstream(dir + "/sizes/" + hex) << diskBytes(dest) << "\n";
      } else {
        fs::remove_all(partial, ec);
      }
      gate.unpacked(hex);
      if (!st.isOk()) {
        return st;
      }
    }
    // Its time of last use, for the collection of unused layers.
    (void)::utimensat(AT_FDCWD, dest.c_str(), nullptr, 0);
  }
  if (img.layer_dirs.empty()) {
    return core::invalidArgument(where + ": its manifest has no layers");
  }
  return img;
}

}  // namespace

core::Result<UnpackedImage> ImageCache::get(const model::ImageRef& ref, const PullOptions& pull) {
  std::string where;
  std::unique_ptr<ImageSource> src;
  switch (ref.kind) {
    case model::ImageRef::Kind::kRegistry:
      return fromRegistry(ref, pull);
    case model::ImageRef::Kind::kOciLayout: {
      where = "image oci:" + ref.path + (ref.tag.empty() ? "" : ":" + ref.tag);
      std::error_code ec;
      if (!fs::is_directory(ref.path, ec)) {
        return core::notFound(where + ": no such folder on this node");
      }
      src = std::make_unique<LayoutSource>(ref.path);
      break;
    }
    case model::ImageRef::Kind::kOciArchive: {
      where = "image oci-archive:" + ref.path;
      std::error_code ec;
      if (!fs::is_regular_file(ref.path, ec)) {
        return core::notFound(where + ": no such file on this node");
      }
      auto a = ArchiveSource::open(ref.path);
      if (!a.isOk()) {
        return a.status().withContext(where);
      }
      src = std::move(a).value();
      break;
    }
  }
  const std::optional<std::string> index_text = src->small("index.json");
  if (!index_text) {
    return core::notFound(where + ": no index.json (not an OCI image layout)");
  }
  const json index = json::parse(*index_text, nullptr, false);
  if (index.is_discarded() || !index.is_object()) {
    return core::invalidArgument(where + ": index.json is not a JSON object");
  }
  TESSERA_ASSIGN_OR_RETURN(const json desc, chooseManifest(*src, index, ref.tag, where, 0));
  TESSERA_ASSIGN_OR_RETURN(const std::string manifest_hex, digestHex(desc, where));
  TESSERA_ASSIGN_OR_RETURN(const json manifest, jsonBlob(*src, manifest_hex, where));
  return unpackPinned(*src, manifest, manifest_hex, where);
}

core::Result<UnpackedImage> ImageCache::unpackPinned(ImageSource& src, const json& manifest,
                                                     const std::string& manifest_hex,
                                                     const std::string& where) {
  std::vector<std::string> pinned;
  LayerGate gate{.claim =
                     [&](const std::string& hex, const std::string& dest) {
                       std::unique_lock lock(mu_);
                       cv_.wait(lock, [&] { return !busy_.contains(hex); });
                       pinned_.insert(hex);
                       pinned.push_back(hex);
                       std::error_code ec;
                       if (fs::is_directory(dest, ec)) {
                         return false;
                       }
                       busy_.insert(hex);
                       return true;
                     },
                 .unpacked =
                     [&](const std::string& hex) {
                       std::lock_guard lock(mu_);
                       busy_.erase(hex);
                       cv_.notify_all();
                     }};
  auto img = unpackImage(dir_, src, manifest, manifest_hex, where, gate);
  if (!img.isOk()) {
    std::lock_guard lock(mu_);
    for (const std::string& hex : pinned) {
      pinned_.erase(pinned_.find(hex));
    }
  }
  return img;
}

void ImageCache::release(const UnpackedImage& image) {
  std::lock_guard lock(mu_);
  for (const std::string& hex : image.layer_keys) {
    if (auto it = pinned_.find(hex); it != pinned_.end()) {
      pinned_.erase(it);
    }
  }
}

core::Result<UnpackedImage> ImageCache::fromRegistry(const model::ImageRef& ref,
                                                     const PullOptions& pull) {
  RegistrySession session(registries_, ref, pull.credentials);
  const std::string where = session.where();
  // Always asked of the registry with the task's own credentials, even when every layer is here.
  TESSERA_ASSIGN_OR_RETURN(RegistryManifest m,
                           session.manifest(ref.digest.empty() ? ref.tag : ref.digest));
  json manifest = json::parse(m.body, nullptr, false);
  for (int depth = 0; m.media_type == kIndexType || m.media_type == kDockerListType; ++depth) {
    if (depth >= 2) {
      return core::invalidArgument(where + ": indexes nested too deep");
    }
    // An index: its linux/amd64 image (or its only one).
    const std::optional<json> chosen = linuxAmd64(manifest);
    if (!chosen) {
      return core::notFound(where + ": not found: no linux/amd64 image in its index " + m.digest);
    }
    TESSERA_ASSIGN_OR_RETURN(const std::string hex, digestHex(*chosen, where));
    TESSERA_ASSIGN_OR_RETURN(m, session.manifest("sha256:" + hex));
    manifest = json::parse(m.body, nullptr, false);
  }
  if (!manifest.is_object() || !manifest.contains("layers") || !manifest["layers"].is_array()) {
    return core::invalidArgument(where + ": the manifest " + m.digest + " (" + m.media_type +
                                 ") has no layers");
  }
  // What is still to download, for the progress.
  int64_t total = 0;
  for (const json& layer : manifest["layers"]) {
    auto hex = digestHex(layer, where);
    std::error_code ec;
    if (hex.isOk() && !fs::is_directory(dir_ + "/layers/" + *hex, ec) && layer.is_object() &&
        layer.contains("size") && layer["size"].is_number_integer()) {
      total += std::max<int64_t>(0, layer["size"].get<int64_t>());
    }
  }
  if (pull.progress) {
    pull.progress(0, total);
  }
  RegistrySource src(session, pull, total);
  auto img = unpackPinned(src, manifest, m.digest.substr(7), where);
  if (!img.isOk() && !src.error().isOk()) {
    return src.error();  // The config's download failed: say why, not only that it is missing.
  }
  return img;
}

int64_t ImageCache::layerBytesLocked(const std::string& hex) {
  std::ifstream in(dir_ + "/sizes/" + hex);
  int64_t n = -1;
  if (in >> n && n >= 0) {
    return n;
  }
  n = diskBytes(dir_ + "/layers/" + hex);
  std::error_code ec;
  fs::create_directories(dir_ + "/sizes", ec);
  std::ofstream(dir_ + "/sizes/" + hex) << n << "\n";
  return n;
}

int64_t ImageCache::bytes() {
  std::lock_guard lock(mu_);
  int64_t total = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_ + "/layers", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find('.') == std::string::npos) {
      total += layerBytesLocked(name);
    }
  }
  return total;
}

int ImageCache::trim(const std::set<std::string>& in_use, std::chrono::seconds keep_unused,
                     int64_t max_bytes) {
  std::set<std::string> keep;
  {
    std::lock_guard lock(mu_);
    struct Layer {
      fs::file_time_type used;
      std::string hex;
      int64_t bytes;
    };
    std::vector<Layer> idle;  // Kept for now, not in use.
    int64_t total = 0;
    const auto cutoff = fs::file_time_type::clock::now() - keep_unused;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_ + "/layers", ec)) {
      const std::string name = e.path().filename().string();
      if (name.find('.') != std::string::npos) {
        continue;  // Half unpacked: goes (unless being unpacked now: collectLocked).
      }
      std::error_code mt;
      const auto used = fs::last_write_time(e.path(), mt);
      if (in_use.contains(name) || pinned_.contains(name)) {
        keep.insert(name);
        total += layerBytesLocked(name);
      } else if (!mt && used > cutoff) {
        idle.push_back({used, name, layerBytesLocked(name)});
        total += idle.back().bytes;
      }
    }
    // Least recently used first, while over the cap.
    std::sort(idle.begin(), idle.end(),
              [](const Layer& a, const Layer& b) { return a.used < b.used; });
    for (const Layer& l : idle) {
      if (max_bytes > 0 && total > max_bytes) {
        total -= l.bytes;
        continue;
      }
      keep.insert(l.hex);
    }
    return collectLocked(keep);
  }
}

int ImageCache::collect(const std::set<std::string>& keep) {
  std::lock_guard lock(mu_);
  return collectLocked(keep);
}

int ImageCache::collectLocked(const std::set<std::string>& keep) {
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_ + "/layers", ec)) {
    const std::string name = e.path().filename().string();
    const std::string hex = name.substr(0, name.find('.'));
    if (!keep.contains(name) && !busy_.contains(hex) && !pinned_.contains(hex)) {
      std::error_code rm;
      fs::remove_all(e.path(), rm);
      removed += rm ? 0 : 1;
      fs::remove(dir_ + "/sizes/" + name, rm);
    }
  }
  return removed;
}

}  // namespace tessera::agent
