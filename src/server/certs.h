// A small certificate authority for `tessera dev`, `tessera tls` and the tests: an ECDSA P-256
// CA that issues server certificates (with IP and DNS subject alternative names) and client
// certificates.
//
//   auto ca = CertAuthority::create("tessera dev CA", std::chrono::hours(24));
//   auto server = ca->issue("localhost", {"localhost"}, {"127.0.0.1"}, /*client=*/false);
//   writeFile(dir + "/ca.pem", ca->certPem());
//   writeFile(dir + "/server.pem", server->cert_pem);  // and server->key_pem
//
// A CA for a fleet that has no PKI of its own (`tessera tls ca create`, as Nomad's); operators
// with one bring their own certificates in the server config.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::server {

struct IssuedCert {
  std::string cert_pem;
  std::string key_pem;
};

class CertAuthority {
 public:
  static core::Result<std::unique_ptr<CertAuthority>> create(const std::string& common_name,
                                                             std::chrono::seconds validity);
  // A CA from its certificate and key (PEM), issuing certificates valid for `validity`.
  // INVALID_ARGUMENT, saying which, when either does not parse, the key is not the
  // certificate's, or the certificate is not a CA's.
  static core::Result<std::unique_ptr<CertAuthority>> load(const std::string& cert_pem,
                                                           const std::string& key_pem,
                                                           std::chrono::seconds validity);
  ~CertAuthority();
  CertAuthority(const CertAuthority&) = delete;
  CertAuthority& operator=(const CertAuthority&) = delete;

  const std::string& certPem() const { return cert_pem_; }
  const std::string& keyPem() const { return key_pem_; }

  // A leaf certificate signed by this CA, for a server (serverAuth, with the given DNS names and
  // IP addresses as subject alternative names) or a client (clientAuth).
  core::Result<IssuedCert> issue(const std::string& common_name,
                                 const std::vector<std::string>& dns_names,
                                 const std::vector<std::string>& ip_addresses, bool client) const;

  struct Keys;

 private:
  CertAuthority() = default;
  std::unique_ptr<Keys> keys_;
  std::string cert_pem_;
  std::string key_pem_;
  std::chrono::seconds validity_{0};
};

// Writes `content` to `path` with mode 0600 (keys) or 0644; errors name the path.
core::Status writeFile(const std::string& path, const std::string& content, bool secret);

}  // namespace tessera::server
