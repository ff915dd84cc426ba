// A CA and a certificate for 127.0.0.1 and localhost, written to DIR/ca.pem, DIR/cert.pem and
// DIR/key.pem, for the integration tests' TLS listeners.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "core/status.h"
#include "server/certs.h"

namespace tessera::integration {

// Returns the CA's PEM (what clients trust).
inline core::Result<std::string> writeTestCertificates(const std::filesystem::path& dir) {
  TESSERA_ASSIGN_OR_RETURN(auto ca,
                           server::CertAuthority::create("test CA", std::chrono::hours(1)));
  TESSERA_ASSIGN_OR_RETURN(server::IssuedCert leaf,
                           ca->issue("localhost", {"localhost"}, {"127.0.0.1"}, false));
  TESSERA_RETURN_IF_ERROR(server::writeFile((dir / "ca.pem").string(), ca->certPem(), false));
  TESSERA_RETURN_IF_ERROR(server::writeFile((dir / "cert.pem").string(), leaf.cert_pem, false));
  TESSERA_RETURN_IF_ERROR(server::writeFile((dir / "key.pem").string(), leaf.key_pem, true));
  return ca->certPem();
}

}  // namespace tessera::integration
