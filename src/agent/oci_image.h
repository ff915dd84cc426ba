// Container images on the node: an OCI image (an image layout folder, `oci:/path[:tag]`, the
// same as a tar file, `oci-archive:/path.tar`, or a registry's, agent/registry.h) resolved to its
// manifest and config, and its layers unpacked once per node into a content-addressed cache
// shared by every task:
//   <dir>/layers/<sha256 hex>/   one layer's files, whiteouts turned into overlayfs's form
//                                (`.wh.NAME`: a 0:0 character device; `.wh..wh..opq`: the
//                                folder's trusted.overlay.opaque=y), ready to be a lowerdir.
// A layer is unpacked into a temporary folder while its bytes are hashed, and renamed into place
// only if they match its digest, so the cache never holds a layer that is not what its name says.
//
//   <dir>/sizes/<hex>            its size on disk in bytes (for the cache's cap).
//
// A registry's image is reused for a task only once that task's own credentials (its pull
// secret, or none) have fetched its manifest from the registry: cached layers save the download,
// never the check, so a tenant cannot run another's private image by naming its digest.
//
//   ImageCache cache("/var/lib/tessera/agent/containers/images", registries);
//   TESSERA_ASSIGN_OR_RETURN(UnpackedImage img, cache.get(ref, {.credentials = creds}));
//   // mount -t overlay -o lowerdir=<img.layer_dirs, top first>,...
//   cache.trim(layers_in_use, keep_unused, max_bytes);
//
// Thread-safe. Pulls and unpacks run in parallel; one layer is unpacked by one call at a time
// (another that needs it waits). The layers get() returns are pinned (never collected) until
// release() is called for them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "agent/registry.h"
#include "core/status.h"
#include "model/task.h"

namespace tessera::agent {

// What the image's config says about how to run it (its "config" object).
struct ImageRunConfig {
  std::vector<std::string> env;  // "KEY=value".
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::string working_dir;
};

struct UnpackedImage {
  std::string manifest_digest;          // "sha256:<hex>".
  std::vector<std::string> layer_dirs;  // Bottom layer first.
  std::vector<std::string> layer_keys;  // Their hex digests, same order (for collect()).
  ImageRunConfig config;
};

class ImageSource;  // Where an image's files come from (oci_image.cc).

// What a pull from a registry needs besides the reference.
struct PullOptions {
  RegistryCredentials credentials;  // The task's pull secret for the image's registry, or none.
  // Called as the layers to download arrive: bytes so far and in all (from the manifest).
  std::function<void(int64_t done, int64_t total)> progress;
  const std::atomic<bool>* cancel = nullptr;  // Set: the download stops with an error.
};

class ImageCache {
 public:
  explicit ImageCache(std::string dir, RegistryOptions registries = {})
      : dir_(std::move(dir)), registries_(std::move(registries)) {}

  // Resolves `ref` and unpacks whatever layer is not cached yet (a registry's: downloaded and
  // checked against its digest first). Errors say what is missing or wrong, naming the image:
  // "unauthorized", "not found", "cannot reach the registry".
  core::Result<UnpackedImage> get(const model::ImageRef& ref, const PullOptions& pull = {});
  // Unpins what get() returned: from then its layers may go (trim) unless in use.
  void release(const UnpackedImage& image);

  // Removes every cached layer whose key is not in `keep` (and any half-unpacked one). Returns
  // how many went.
  int collect(const std::set<std::string>& keep);

  // The cache's housekeeping: layers in `in_use` stay; others go once unused for `keep_unused`,
  // and, while the cache holds more than `max_bytes` (0: no cap), the least recently used go
  // first. Returns how many went.
  int trim(const std::set<std::string>& in_use, std::chrono::seconds keep_unused,
           int64_t max_bytes);
  // Bytes the cached layers take on disk.
  int64_t bytes();

 private:
  core::Result<UnpackedImage> fromRegistry(const model::ImageRef& ref, const PullOptions& pull);
  // The layers of `manifest`, each pinned, unpacked where missing (claims in busy_).
  core::Result<UnpackedImage> unpackPinned(ImageSource& src, const nlohmann::json& manifest,
                                           const std::string& manifest_hex,
                                           const std::string& where);
  int64_t layerBytesLocked(const std::string& hex);
  int collectLocked(const std::set<std::string>& keep);

  std::string dir_;
  RegistryOptions registries_;
  std::mutex mu_;               // Guards the fields below and which layers are in the cache folder.
  std::condition_variable cv_;  // busy_ changed.
  std::set<std::string> busy_;  // Layers being unpacked (by one call each).
  std::multiset<std::string> pinned_;  // Layers get() returned and release() has not.
};

}  // namespace tessera::agent
