# Tessera server config.
storage "sqlite" { path = "/var/lib/tessera/tessera.db" }
listener "tcp" {
  address          = "127.0.0.1:8300"
  chroot_tenant    = "team-1"
  tls_cert_file    = "/etc/tessera/team-1.pem"
  tls_key_file     = "/etc/tessera/team-1-key.pem"
  tls_client_ca_file = "/etc/tessera/clients-ca.pem"   # optional mTLS
}
listener "tcp" { address = "0.0.0.0:8200" tls_cert_file = "..." tls_key_file = "..." }
audit "file" { path = "/var/log/tessera/audit.log" }
