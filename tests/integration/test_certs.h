// A CA and a certificate for 127.0.0.1 and localhost, written to DIR/ca.pem, DIR/cert.pem and
// DIR/key.pem, for the integration tests' TLS listeners.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/certs.h"

namespace tessera::integration {

// Returns the CA's PEM (what clients trust). `ips`: more addresses the server's certificate is
// good for (a test network's).
inline core::Result<std::string> writeTestCertificates(const std::filesystem::path& dir,
                                                       std::vector<std::string> ips = {}) {
  TESSERA_ASSIGN_OR_RETURN(auto ca,
                           server::CertAuthority::create("test CA", std::chrono::hours(1)));
  ips.insert(ips.begin(), "127.0.0.1");
  TESSERA_ASSIGN_OR_RETURN(server::IssuedCert leaf,
                           ca->issue("localhost", {"localhost"}, ips, false));
  TESSERA_RETURN_IF_ERROR(server::writeFile((dir / "ca.pem").string(), ca->certPem(), false));
  TESSERA_RETURN_IF_ERROR(server::writeFile((dir / "cert.pem").string(), leaf.cert_pem, false));
  TESSERA_RETURN_IF_ERROR(server::writeFile((dir / "key.pem").string(), leaf.key_pem, true));
  return ca->certPem();
}

}  // namespace tessera::integration
