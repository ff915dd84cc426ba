// Image pulls from registries (the OCI distribution spec, docs/agent.md "Images from
// registries"): manifests and blobs of one repository over HTTPS, with the registry's own
// authentication: anonymous, HTTP basic, or a Bearer token from the realm its
// `WWW-Authenticate` challenge names (Docker Hub, GHCR, Harbor, nvcr.io), fetched with the
// task's credentials. Each registry may have a CA file of its own and mirrors, tried first
// (anonymously: a tenant's credentials go only to the registry they are for).
//
//   RegistryOptions options;
//   options.hosts["127.0.0.1:5000"].ca_file = "/etc/tessera/registry-ca.pem";
//   RegistrySession s(options, *model::parseImageRef("127.0.0.1:5000/team/app:1"),
//                     {.username = "team", .password = "..."});
//   TESSERA_ASSIGN_OR_RETURN(RegistryManifest m, s.manifest("1"));
//   TESSERA_RETURN_IF_ERROR(s.blob(m.digest_of_a_layer, [](const void* p, size_t n) {...}));
//
// Errors name the image and say what to do: "unauthorized" (credentials missing or refused),
// "not found" (no such tag or digest), "cannot reach" (connection, TLS), each with the code a
// task's failure keeps (kPermissionDenied, kNotFound, kUnavailable). Not thread-safe: one
// session per pull.
#pragma once

#include <openssl/evp.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/task.h"

namespace tessera::agent {

// The agent's config for one registry: `registry "docker.io" { ca_file = "...", mirror = [...] }`.
struct RegistryHostConfig {
  std::string ca_file;               // PEM CA certificate(s); "": the system's trusted CAs.
  std::vector<std::string> mirrors;  // "https://mirror.example[:port]" (or http:// if said so).
};

struct RegistryOptions {
  std::map<std::string, RegistryHostConfig> hosts;  // By registry, as references name it.
  // Connecting, the TLS handshake and each read must finish within it.
  std::chrono::milliseconds timeout{30'000};
};

struct RegistryCredentials {
  std::string username;
  std::string password;
  bool empty() const { return username.empty() && password.empty(); }
};

// SHA-256 of bytes as they come, as the hex of an OCI digest ("sha256:<hex>"): blobs are
// checked against their names with it (here and in agent/oci_image.h).
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::string hex();  // Once, at the end.

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

struct RegistryManifest {
  std::string body;        // As served (its digest is over these bytes).
  std::string media_type;  // Content-Type, or the body's mediaType.
  std::string digest;      // "sha256:<hex>" of `body`.
};

class RegistrySession {
 public:
  RegistrySession(const RegistryOptions& options, model::ImageRef ref,
                  RegistryCredentials credentials);
  ~RegistrySession();
  RegistrySession(const RegistrySession&) = delete;
  RegistrySession& operator=(const RegistrySession&) = delete;

  // The manifest (or index) `reference` names, a tag or a digest; by digest, the body must
  // match it. The first endpoint that serves it (a mirror, else the registry) serves the blobs.
  core::Result<RegistryManifest> manifest(const std::string& reference);
  // Streams blob `digest` to `consume`. Not verified here: the caller hashes what it keeps.
  core::Status blob(const std::string& digest,
                    const std::function<core::Status(const void*, size_t)>& consume);
  // "image <reference>" for errors.
  std::string where() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::agent
