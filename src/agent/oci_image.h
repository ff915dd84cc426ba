// Container images on the node: an OCI image (an image layout folder, `oci:/path[:tag]`, or the
// same as a tar file, `oci-archive:/path.tar`) resolved to its manifest and config, and its
// layers unpacked once per node into a content-addressed cache shared by every task:
//   <dir>/layers/<sha256 hex>/   one layer's files, whiteouts turned into overlayfs's form
//                                (`.wh.NAME`: a 0:0 character device; `.wh..wh..opq`: the
//                                folder's trusted.overlay.opaque=y), ready to be a lowerdir.
// A layer is unpacked into a temporary folder while its bytes are hashed, and renamed into place
// only if they match its digest, so the cache never holds a layer that is not what its name says.
//
//   ImageCache cache("/var/lib/tessera/agent/containers/images");
//   TESSERA_ASSIGN_OR_RETURN(UnpackedImage img, cache.get(ref));
//   // mount -t overlay -o lowerdir=<img.layer_dirs, top first>,...
//   cache.collect(layers_still_used);
//
// Thread-safe: one lock around every call (unpacking the same layer twice is never useful).
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <vector>

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

class ImageCache {
 public:
  explicit ImageCache(std::string dir) : dir_(std::move(dir)) {}

  // Resolves `ref` and unpacks whatever layer is not cached yet. Errors say what is missing or
  // wrong, naming the image (a registry reference: "registry pulls are not supported yet").
  core::Result<UnpackedImage> get(const model::ImageRef& ref);

  // Removes every cached layer whose key is not in `keep` (and any half-unpacked one). Returns
  // how many went.
  int collect(const std::set<std::string>& keep);

 private:
  std::string dir_;
  std::mutex mu_;  // Guards the cache folder's content.
};

}  // namespace tessera::agent
